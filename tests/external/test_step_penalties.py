"""The ``step-penalties`` layout (``verispec.external.step_penalties``): a step whose target law reads the token
history (repetition, frequency and presence penalties, ``verispec.models.penalties``), checked exactly, its broken
twins caught at their closed forms.

The closed form: a chain:1 step drafts x ~ q and verifies it by Leviathan et al.'s rule against a law a (Theorem 1:
the first token then follows a exactly); after an accepted x it draws the bonus from a law b(. | x), and after a
rejection the block ends and the target t1(. | x) continues it. So the two-token law is
L(x, y) = min(a(x), q(x)) b(y | x) + (a(x) - min(a(x), q(x))) t1(y | x), checked against t0(x) t1(y | x); a step
that penalises with the wrong history has a = its law at position 0 and b = its law after x. The penalties here are
the support module's, written from their definitions in torch (``tests/support/step_penalties_rules.penalised``)."""

from __future__ import annotations

import numpy as np
import pytest

from verispec.cli import main
from verispec.errors import VerispecError
from verispec.models.penalties import DEFAULT_PENALTIES, Penalties
from verispec.simulator.problems import ContextFreeProblem
from verispec.verdict import Verdict

torch = pytest.importorskip("torch")

from tests.support import step_penalties_rules as rules  # noqa: E402
from verispec.external.check import check_external  # noqa: E402

P, Q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
PROBLEM = ContextFreeProblem(P, Q)
PROMPT, HISTORY, SHIFT = [0, 0, 0], [2, 2], 1.0  # the layout's prompt, earlier output and logit shift, as documented
PENALTIES = (1.5, 0.5, 0.25)  # DEFAULT_PENALTIES
LOGITS = torch.log(torch.tensor(P, dtype=torch.float64)) + SHIFT


def _law(output: list, **broken) -> np.ndarray:
    output = output + (PROMPT if broken.get("prompt_as_output") else [])
    logits = rules.penalised(LOGITS, PROMPT, output, *PENALTIES, one_sign=broken.get("one_sign", False))
    return torch.softmax(logits, -1).numpy()


def _closed_form_tv(first: np.ndarray, after) -> float:
    """TV between the step's two-token law (a = first, b(. | x) = after(x)) and the penalised target's."""
    right = [_law(HISTORY + [x]) for x in range(3)]
    target = _law(HISTORY)
    accepted = np.minimum(first, Q)
    emitted = np.stack([accepted[x] * after(x) + (first[x] - accepted[x]) * right[x] for x in range(3)])
    wanted = np.stack([target[x] * right[x] for x in range(3)])
    return 0.5 * float(np.abs(emitted - wanted).sum())


def _check(function, **options):
    return check_external(function, "step-penalties", "chain:1", problem=PROBLEM, rng="capture",
                          sampling="temperature=1", mode="exact", **options)


def test_the_penalties_at_a_hand_computed_point():
    logits = np.array([0.5, -1.0, -np.inf, 2.0])
    got = Penalties(2.0, 0.5, 0.25).apply(logits, prompt=[0], output=[1, 1, 3])
    # token 0: prompt only, positive: 0.5 / 2; token 1: output twice, negative: -1 * 2 - 2 * 0.5 - 0.25;
    # token 2: -inf stays; token 3: output once, positive: 2 / 2 - 0.5 - 0.25
    assert np.array_equal(got, [0.25, -3.25, -np.inf, 0.25])
    assert np.array_equal(Penalties().apply(logits, [0], [1]), logits)  # no penalty: the logits as they are
    torch_got = rules.penalised(torch.tensor([0.5, -1.0, -np.inf, 2.0], dtype=torch.float64), [0], [1, 1, 3],
                                2.0, 0.5, 0.25)
    assert np.array_equal(torch_got.numpy(), got)  # the support's twin agrees (the closed forms below use it)


def test_the_setting_reads_back_and_bad_text_is_refused_in_one_line():
    setting = Penalties.parse(DEFAULT_PENALTIES)
    assert (setting.repetition, setting.frequency, setting.presence) == PENALTIES
    assert Penalties.parse(setting.spec()) == setting and not Penalties.parse("").active
    for text, words in (("repetition=0", "> 0"), ("frequncy=1", "did you mean 'frequency'"),
                        ("presence=1,presence=2", "twice"), ("repetition=nan", "finite"), ("presence", "name=value"),
                        ("frequency=abc", "a number"), ("repetition=1.2,", "name=value")):
        with pytest.raises(VerispecError, match=words) as caught:
            Penalties.parse(text)
        assert "\n" not in str(caught.value)


def test_the_correct_step_is_lossless_and_the_law_reads_the_history():
    report = _check(rules.penalties_step)
    assert report.verdict is Verdict.LOSSLESS and report.tv_distance < 1e-12
    assert report.offsets_visible  # the penalised law moves with the prefix, so an offset would show
    assert "history (2, 2)" in report.note


@pytest.mark.parametrize(("name", "first", "after"), [
    ("penalties_step_no_history", lambda: _law([]), lambda x: _law([x])),
    ("penalties_step_prompt_as_output", lambda: _law(HISTORY, prompt_as_output=True),
     lambda x: _law(HISTORY + [x], prompt_as_output=True)),
    ("penalties_step_bonus_without_drafts", lambda: _law(HISTORY), lambda x: _law(HISTORY)),
    ("penalties_step_one_sign", lambda: _law(HISTORY, one_sign=True), lambda x: _law(HISTORY + [x], one_sign=True)),
])
def test_each_broken_twin_is_lossy_at_its_closed_form(name, first, after):
    report = _check(getattr(rules, name))
    expected = _closed_form_tv(first(), after)
    assert expected > 0.05 and report.verdict is Verdict.LOSSY
    assert abs(report.tv_distance - expected) < 1e-9  # float64 law from torch's float64 softmax on both sides


def test_penalties_are_refused_off_their_layout_and_bad_text_ends_in_one_line(capsys):
    with pytest.raises(VerispecError, match="needs the step-penalties layout"):
        check_external(rules.penalties_step, "step", "chain:1", problem=PROBLEM, rng="capture", penalties="")
    status = main(["check-external", "tests.support.step_penalties_rules:penalties_step", "--layout", "step-penalties",
                   "--tree", "chain:1", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.2,0.6", "--rng", "capture",
                   "--mode", "exact", "--penalties", "repetition=-1"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "repetition penalty must be > 0" in err and len(err.splitlines()) == 1


def test_check_step_takes_penalties_with_their_layout_alone():
    from tests.support import step_rules
    from verispec.external.step import check_step
    from verispec.models.sampling import Sampling
    from verispec.simulator.tree_specs import parse_tree

    common = dict(name="step", mode="exact", alpha=1e-6, detect_tv=0.1, power=0.9, seed=0, call_timeout=None)
    with pytest.raises(VerispecError, match="penalties go with the step-penalties layout alone"):
        check_step(rules.penalties_step, "step-penalties", parse_tree("chain:1"), PROBLEM, Sampling(), **common)
    with pytest.raises(VerispecError, match="penalties go with the step-penalties layout alone"):
        check_step(step_rules.step, "step", parse_tree("chain:1"), PROBLEM, Sampling(), penalties=Penalties(),
                   **common)
