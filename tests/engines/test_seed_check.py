"""The seed check (``verispec.engines.seeds``) on step functions written here, without an engine: a step whose
seeded requests draw only from their own generators is REPRODUCIBLE; its broken twins, one reading the checked
request's acceptance uniform from torch's global generator (vLLM mutant 737's effect: a request's slice of the
uniforms left empty) and one reading a neighbour's generator, are IRREPRODUCIBLE with the witness; a raise, a spent
budget and a tree that is not a chain end as the module says. The miss probability is derived here twice: as a
fraction by hand, and by simulating the broken twin (its false-failure rate stated at the assertion)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from verispec.engines import seeds
from verispec.errors import VerispecError
from verispec.simulator import ContextFreeProblem

PROBLEM = ContextFreeProblem([0.6, 0.4], [0.3, 0.7])


def _step(global_uniform_for=None, neighbour_generator=False):
    """A ``step-ragged`` function of one draft position (chain:1) for each request with drafts: the draft from q on
    the request's generator, accepted when u < p(x) / q(x) (u from the same generator), else the residual's token
    (V = 2: the other token), the bonus from p on the generator. ``global_uniform_for``: that request's u from
    torch's global generator; ``neighbour_generator``: request 1's u from request 2's generator."""
    def step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds_):
        p = torch.exp(target_model(input_ids[:1])[0, -1])
        q = torch.exp(draft_model(input_ids[:1])[0, -1])
        generators = [torch.Generator().manual_seed(int(seed)) for seed in seeds_]
        rows = torch.full((3, 2), -1, dtype=torch.int64)
        for request in range(3):
            own = generators[request]
            if int(num_draft_tokens[request]) == 0:
                rows[request, 0] = int(torch.multinomial(p, 1, generator=own))
                continue
            draft = int(torch.multinomial(q, 1, generator=own))
            source = generators[2] if neighbour_generator and request == 1 else own
            uniform = (torch.rand(()) if request == global_uniform_for else torch.rand((), generator=source))
            if float(uniform) < float(p[draft] / q[draft]):
                rows[request, :2] = torch.tensor([draft, int(torch.multinomial(p, 1, generator=own))])
            else:
                rows[request, 0] = 1 - draft
        return rows

    return step


def test_a_step_drawing_from_its_own_generators_is_reproducible():
    row = seeds.seeds_check(_step(), "chain:1", PROBLEM, "temperature=1", time_budget=600)
    assert row["verdict"] == "REPRODUCIBLE" and row["mode"] == "seeds"
    assert f"{seeds.SEEDS * 3 * seeds.REPEATS} calls" in row["note"]


@pytest.mark.parametrize("broken", [{"global_uniform_for": 1}, {"neighbour_generator": True}])
def test_a_request_reading_another_stream_is_irreproducible_with_its_witness(broken):
    row = seeds.seeds_check(_step(**broken), "chain:1", PROBLEM, "temperature=1", time_budget=600)
    assert row["verdict"] == "IRREPRODUCIBLE"
    witness = row["witness"]
    held = witness["request"]
    assert held in (1, 2)  # the neighbour's twin also shows from request 2's side: its seed moves request 1's tokens
    assert witness["seeds"][0][held] == witness["seeds"][1][held] and witness["emitted"][0] != witness["emitted"][1]
    assert f"seed {witness['seeds'][0][held]}" in row["note"]


def test_the_miss_probability_is_the_closed_form():
    """Draft 0 (q = 0.3) has p/q = 2: always accepted, the calls agree; draft 1 (q = 0.7) has r = 4/7: R calls
    agree with probability r^R + (1 - r)^R = (4^R + 3^R) / 7^R."""
    repeats, trials = 4, 24
    agree = Fraction(3, 10) + Fraction(7, 10) * Fraction(4 ** repeats + 3 ** repeats, 7 ** repeats)
    assert math.isclose(seeds.miss_probability(PROBLEM, trials, repeats), float(agree ** trials), rel_tol=1e-12)
    assert seeds.miss_probability(PROBLEM, trials, repeats) < 1e-9


def test_the_miss_probability_is_what_the_broken_twin_does():
    """One seed, R calls each, many times: the share of seeds whose calls all agree under the twin that reads the
    checked request's uniform from the global generator is the per-seed miss probability. 2,000 seeds at p = 0.398:
    the share lies within 6 standard deviations (0.066) of it except with probability about 2e-9."""
    torch.manual_seed(0)
    step, problem = _step(global_uniform_for=1), PROBLEM
    expected = seeds.miss_probability(problem, 1, seeds.REPEATS)
    from verispec.external.step import STEP_LAYOUTS
    from verispec.models.sampling import Sampling

    sampling = Sampling.parse("temperature=1")
    arguments = list(STEP_LAYOUTS["step-ragged"].arguments(problem, sampling, 1, None, neighbours={0: sampling,
                                                                                                   2: sampling}))
    agreed, count = 0, 2000
    for seed in range(count):
        arguments[-1] = torch.tensor([10 ** 6 + 3 * seed, 2 * 10 ** 6 + seed, 3 * 10 ** 6 + seed])
        first = [tuple(step(*arguments)[1].tolist()) for _ in range(seeds.REPEATS)]
        agreed += len(set(first)) == 1
    deviation = math.sqrt(expected * (1 - expected) / count)
    assert abs(agreed / count - expected) < 6 * deviation


def test_a_raise_a_spent_budget_and_a_tree_not_a_chain_end_as_said():
    def raising(*arguments):
        raise ValueError("seeded batch broke")

    row = seeds.seeds_check(raising, "chain:1", PROBLEM, "temperature=1", time_budget=600)
    assert row["verdict"] == "RAISES" and "seeded batch broke" in row["note"]
    row = seeds.seeds_check(_step(), "chain:1", PROBLEM, "temperature=1", time_budget=0.0)
    assert row["verdict"] == "INCONCLUSIVE" and "--time-budget" in row["note"]
    with pytest.raises(VerispecError, match="not a chain"):
        seeds.seeds_check(_step(), "k2:1", PROBLEM, "temperature=1", time_budget=600)


def test_the_check_status_counts_an_irreproducible_row_as_a_finding():
    from verispec.engines.check import exit_status

    rows = [{"verdict": "REPRODUCIBLE", "as_expected": True}, {"verdict": "LOSSLESS", "as_expected": True}]
    assert exit_status(rows) == 0
    assert exit_status(rows + [{"verdict": "IRREPRODUCIBLE", "as_expected": False}]) == 1
    assert np.isfinite(seeds.miss_probability(PROBLEM))
