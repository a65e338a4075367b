"""The requested sampling (``verispec.models.Sampling``: temperature, top-k, top-p, min-p) against an independent
enumeration written here, against transformers' own warpers, and its command-line text.

The enumeration decides every token by its definition, in plain Python over all tokens of a row, with no sort:
top-k keeps a token iff fewer than k tokens score strictly more; top-p keeps it iff the probability of the tokens
scoring strictly more is < top_p; min-p keeps it iff p / max p = exp(score - max score) >= min_p. Rows with ties
at each boundary are built so that the boundary is exact in float64 (logits that are logs of powers of two, and
temperatures that are powers of two, which divide them exactly), and every broken twin of the rules (min-p against
the sum, top-p removing a tie group at its boundary, min-p strict, top-k keeping exactly k, the temperature applied
after the filters) must disagree with the enumeration on these rows."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

from verispec.errors import VerispecError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.models.sampling import Sampling  # noqa: E402  (after the optional imports)

HALF, QUARTER = math.log(0.5), math.log(0.25)

#: Rows with ties at the boundaries (V = 2..6): equal logits at the k-th score, tie groups whose probability
#: straddles a top-p boundary (p = [0.4, 0.3, 0.3], five equal tokens, [4, 2, 2, 1]/9), tokens exactly at min-p's
#: threshold (weights 1/2 and 1/4 of the largest: min-p 0.5 and 0.25 keep them), tied maxima (min-p 1 keeps
#: them all), and -inf entries (tokens of probability 0).
TIED_ROWS = [
    [0.0, 0.0],
    [math.log(0.4), math.log(0.3), math.log(0.3)],
    [math.log(0.3), math.log(0.4), math.log(0.3), -math.inf],
    [0.0] * 5,
    [0.0, HALF, HALF, QUARTER],
    [HALF, 0.0, QUARTER, HALF, -math.inf, QUARTER],
    [2.0, 1.0, 1.0, 1.0, 0.0],
    [1.0, 1.0, 0.0, 0.0, 0.0, -1.0],
    [0.0, -math.inf],
]

TEMPERATURES = (0.5, 1.0, 1.7)
TOP_KS = (None, 1, 2, 4)
TOP_PS = (None, 0.35, 0.5, 0.9)
MIN_PS = (None, 0.2, 0.25, 0.5, 1.0)


def _random_rows() -> list[list[float]]:
    rng = np.random.default_rng(65)
    return [list(rng.normal(0, scale, vocab)) for vocab in range(2, 7) for scale in (0.5, 2.0, 5.0)]


RANDOM_ROWS = _random_rows()


def _enumerated(row: list[float], sampling: Sampling) -> list[float]:
    """The law of one row by the definitions, token by token (module docstring)."""
    scores = [logit / sampling.temperature for logit in row]
    tokens = range(len(scores))
    kept = [True] * len(scores)

    def law() -> list[float]:
        top = max(scores[i] for i in tokens if kept[i])
        weights = [math.exp(scores[i] - top) if kept[i] else 0.0 for i in tokens]
        total = math.fsum(weights)
        return [weight / total for weight in weights]

    if sampling.top_k is not None:
        kept = [sum(other > mine for other in scores) < sampling.top_k for mine in scores]
    if sampling.top_p is not None:
        probability = law()
        kept = [kept[i] and math.fsum(probability[j] for j in tokens if kept[j] and scores[j] > scores[i])
                < sampling.top_p for i in tokens]
    if sampling.min_p is not None:
        top = max(scores[i] for i in tokens if kept[i])
        kept = [kept[i] and math.exp(scores[i] - top) >= sampling.min_p for i in tokens]
    return law()


def _settings():
    return [Sampling(*parts) for parts in itertools.product(TEMPERATURES, TOP_KS, TOP_PS, MIN_PS)]


def _groups(rows):
    """The rows grouped by vocabulary size (one batched call a size)."""
    by_size: dict[int, list] = {}
    for row in rows:
        by_size.setdefault(len(row), []).append(row)
    return [np.array(group, dtype=np.float64) for group in by_size.values()]


def _exact(rows, sampling) -> bool:
    """Whether the tied rows stay exact under ``sampling``: their logits divided by the temperature are exact for
    powers of two only."""
    return rows is RANDOM_ROWS or math.log2(sampling.temperature).is_integer()


def _mismatch(kind=Sampling, rows_sets=(TIED_ROWS, RANDOM_ROWS)):
    """The first (setting, row) where ``kind``'s numpy law differs from the enumeration by more than 1e-12, or
    None."""
    for sampling in _settings():
        candidate = kind(sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p)
        for rows in rows_sets:
            if not _exact(rows, sampling):
                continue
            for group in _groups(rows):
                got = candidate.probabilities(group)
                for row, law in zip(group, got):
                    expected = _enumerated(list(row), sampling)
                    if not np.allclose(law, expected, rtol=0, atol=1e-12):
                        return sampling, list(row), law, expected
    return None


def test_the_tied_rows_sit_exactly_on_their_thresholds():
    """The premise of the tied rows: p / max p of their logits is exactly 1/2 and 1/4 in float64 (min-p 0.5 and
    0.25 sit on it), and the temperature 0.5 turns one logit into the other exactly."""
    assert math.exp(HALF) == 0.5 and math.exp(QUARTER) == 0.25 and HALF / 0.5 == QUARTER


def test_the_law_is_the_enumerated_one_on_tied_and_random_rows():
    """Every combination of the four parts (3 temperatures x 4 top-k x 4 top-p x 5 min-p), on the tied rows (at
    the temperatures that keep them exact) and on random rows at V = 2..6: the numpy law equals the enumeration to
    1e-12."""
    found = _mismatch()
    assert found is None, f"setting, row, law, enumerated: {found}"


def test_torch_and_numpy_give_the_same_law():
    """The torch path (float64 logits; float32 logits, which take the k-largest path under top-k) equals the numpy
    path to 1e-12 on every setting and row."""
    rows32 = [list(np.float32(row).astype(np.float64)) for row in RANDOM_ROWS]
    for sampling in _settings():
        for rows in (TIED_ROWS, RANDOM_ROWS):
            for group in _groups(rows):
                expected = sampling.probabilities(group)
                got = sampling.probabilities(torch.from_numpy(group))
                assert got.dtype == torch.float64 and isinstance(expected, np.ndarray)
                np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)
        for group in _groups(rows32):
            expected = sampling.probabilities(group)
            got = sampling.probabilities(torch.from_numpy(group).to(torch.float32))
            np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)


def _transformers_law(logits, sampling: Sampling):
    """transformers' own law: its warpers in ``_get_logits_processor``'s order, then a softmax."""
    warpers = []
    if sampling.temperature != 1:
        warpers.append(transformers.TemperatureLogitsWarper(float(sampling.temperature)))
    if sampling.top_k is not None:
        warpers.append(transformers.TopKLogitsWarper(sampling.top_k))
    if sampling.top_p is not None and sampling.top_p < 1:
        warpers.append(transformers.TopPLogitsWarper(sampling.top_p))
    if sampling.min_p is not None:
        warpers.append(transformers.MinPLogitsWarper(sampling.min_p))
    scores = logits.clone()
    for warper in warpers:
        scores = warper(None, scores)
    return torch.softmax(scores, dim=-1)


def test_untied_rows_have_transformers_law():
    """On the random rows (no ties among their finite logits; one batch, padded to V = 6 with -inf, tokens of
    probability 0) every setting's law equals transformers' warpers' to 1e-12 (float64)."""
    logits = torch.tensor([row + [-math.inf] * (6 - len(row)) for row in RANDOM_ROWS], dtype=torch.float64)
    for sampling in _settings():
        torch.testing.assert_close(sampling.probabilities(logits), _transformers_law(logits, sampling), rtol=0,
                                   atol=1e-12)


def test_a_tie_group_at_the_top_p_boundary_is_kept_whole_where_transformers_keeps_part():
    """p = [0.4, 0.3, 0.3] and top-p 0.5: the 0.3s have 0.4 < 0.5 more probable, so both stay (the law is p);
    transformers' sort keeps 0.4 and one 0.3 (which one is the sort's choice) — the documented difference."""
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.3]], dtype=torch.float64))
    sampling = Sampling(1.0, None, 0.5)
    torch.testing.assert_close(sampling.probabilities(logits), torch.exp(logits), rtol=0, atol=1e-15)
    theirs = _transformers_law(logits, sampling)[0]
    assert int((theirs > 0).sum()) == 2 and float(theirs[0]) == pytest.approx(4 / 7)


def test_switched_off_parts_change_nothing():
    """top_p = 1 and min_p = 0 are off: the same law as None, bit for bit."""
    for group in _groups(RANDOM_ROWS + TIED_ROWS):
        for temperature, top_k in itertools.product((0.7, 1.0), (None, 2)):
            plain = Sampling(temperature, top_k).probabilities(group)
            assert np.array_equal(Sampling(temperature, top_k, 1.0, 0.0).probabilities(group), plain)


class _MinPAgainstTheSum(Sampling):
    def _min_p_removed(self, scores):
        # a token removed when p < min_p (p against the sum of the probabilities, 1) instead of min_p * max p
        return scores - np.log(np.exp(scores).sum(axis=-1, keepdims=True)) < math.log(self.min_p)


class _MinPStrict(Sampling):
    def _min_p_removed(self, scores):
        return scores - scores.max(axis=-1, keepdims=True) <= math.log(self.min_p)


class _TopPDropsTies(Sampling):
    def _top_p_floor(self, ordered):
        # a tie group at the boundary removed whole: the floor raised past it (the most likely tokens excepted)
        floor = super()._top_p_floor(ordered)
        tied = ((ordered == floor).sum(-1, keepdims=True) > 1) & (floor < ordered[..., -1:])
        return np.where(tied, np.nextafter(floor, np.inf), floor)


class _TopKKeepsExactlyK(Sampling):
    def _removed(self, scores):
        removed = super()._removed(scores)
        if self.top_k is not None and self.top_k < scores.shape[-1]:
            rank = np.argsort(np.argsort(-scores, axis=-1, kind="stable"), axis=-1)
            removed = removed | (rank >= self.top_k)
        return removed


class _TemperatureAfterTheFilters(Sampling):
    def _removed(self, scores):
        return super()._removed(scores * self.temperature)  # the filters see the raw logits


@pytest.mark.parametrize("twin", [_MinPAgainstTheSum, _MinPStrict, _TopPDropsTies, _TopKKeepsExactlyK,
                                  _TemperatureAfterTheFilters], ids=lambda twin: twin.__name__)
def test_the_enumeration_catches_a_broken_twin(twin):
    """Negative controls: each twin breaks one rule, and the comparison of the first test finds a row it gets
    wrong (the strict min-p, the tie-dropping top-p and top-k on the tied rows, which are there for them)."""
    rows_sets = (TIED_ROWS,) if twin in (_MinPStrict, _TopPDropsTies, _TopKKeepsExactlyK) else (RANDOM_ROWS,)
    assert _mismatch(twin, rows_sets) is not None


@pytest.mark.parametrize("row", [[1.0, math.nan, 0.0], [-math.inf, -math.inf, -math.inf], [0.0, math.inf, 1.0]],
                         ids=["nan", "all-minus-inf", "plus-inf"])
@pytest.mark.parametrize("sampling", [Sampling(), Sampling(0.7, 2, 0.9, 0.1), Sampling(1.0, None, None, 0.5),
                                      Sampling(0.0)], ids=str)
def test_a_row_without_a_law_is_never_a_token(row, sampling):
    """numpy logits: refused in one line naming the row. torch logits (float64, and float32 through the k-largest
    path): that row's law is all NaN, the other rows' untouched (a torch law is computed without a device
    synchronisation; its callers name the context that holds it)."""
    good = [0.0, 1.0, 2.0]
    with pytest.raises(VerispecError, match="logits row 1 holds") as caught:
        sampling.probabilities(np.array([good, row]))
    assert "\n" not in str(caught.value)
    expected = sampling.probabilities(np.array([good]))[0]
    for dtype in (torch.float64, torch.float32):
        law = sampling.probabilities(torch.tensor([good, row], dtype=dtype))
        assert bool(law[1].isnan().all())
        np.testing.assert_allclose(law[0].numpy(), expected, rtol=0, atol=1e-12)
        assert sampling.support(torch.tensor(row, dtype=dtype)) is None


def test_the_refusal_names_what_the_row_holds():
    for row, words in (([1.0, math.nan], "a NaN"), ([math.inf, 0.0], "+inf"), ([-math.inf] * 2, "only -inf")):
        with pytest.raises(VerispecError, match=f"^the logits row holds {re.escape(words)}"):
            Sampling(0.7, 1, 0.5, 0.2).probabilities(np.array(row))
        with pytest.raises(VerispecError, match=re.escape(f"logits row (1, 0) holds {words}")):
            Sampling().probabilities(np.array([[[0.0, 0.0]], [row]]))


def test_min_p_reaches_support_and_compact_probabilities():
    """``support`` (one row, host sums) and ``compact_probabilities`` (float32 rows, the k largest) keep exactly
    the full law's tokens under min-p, a token exactly at its threshold included."""
    from verispec.simulator.problems import compact_law

    rng = np.random.default_rng(7)
    logits = torch.tensor(rng.normal(0, 2, (6, 40)), dtype=torch.float32)
    exact = -30.0 - torch.arange(40, dtype=torch.float64)  # distinct: no tie at the k-th score
    exact[3], exact[17], exact[25] = 0.0, HALF, QUARTER  # min-p 0.5 keeps 17 (exactly at it), drops 25
    for sampling in (Sampling(0.8, 6, None, 0.2), Sampling(1.0, 8, 0.9, 0.1), Sampling(1.0, 5, None, 0.5)):
        for row in list(logits) + [exact]:
            ids, values = sampling.support(row)
            law = sampling.probabilities(row)
            assert ids == torch.nonzero(law).flatten().tolist()
            np.testing.assert_allclose(values, law[ids].numpy(), rtol=1e-12)
        for (support, values), law in zip(sampling.compact_probabilities(logits), sampling.probabilities(logits)):
            expected_support, expected_values = compact_law(law.numpy())
            assert np.array_equal(support, expected_support) and np.array_equal(values, expected_values)
    assert Sampling(1.0, 5, None, 0.5).support(exact)[0] == [3, 17]


# --- the command-line text ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("", Sampling()),
    ("temperature=0.7,top_k=20,top_p=0.8,min_p=0.05", Sampling(0.7, 20, 0.8, 0.05)),
    (" min_p = 0.1 , temperature=1.5", Sampling(1.5, None, None, 0.1)),
    ("top_p=1", Sampling(1.0, None, 1.0)),
    ("min_p=0,top_k=3", Sampling(1.0, 3, None, 0.0)),
    ("temperature=2e-3", Sampling(0.002)),
])
def test_parse_reads_every_part_and_spec_gives_the_text_back(text, expected):
    parsed = Sampling.parse(text)
    assert parsed == expected
    assert Sampling.parse(parsed.spec()) == parsed
    assert Sampling.parse(parsed.spec()).spec() == parsed.spec()


def test_spec_and_describe_are_canonical():
    assert Sampling(0.7, 20, 0.8, 0.05).spec() == "temperature=0.7,top_k=20,top_p=0.8,min_p=0.05"
    assert Sampling().spec() == "temperature=1"
    assert Sampling(0.7, 20, 0.8, 0.05).describe() == "temperature 0.7, then top-k 20, top-p 0.8, min-p 0.05"
    assert Sampling().describe() == "plain sampling at temperature 1"
    assert Sampling(0.0).describe() == "greedy decoding (temperature 0)"
    assert Sampling.parse("temperature=0", greedy=True) == Sampling(0.0)


@pytest.mark.parametrize("text,words", [
    ("temprature=0.7", ["'temprature'", "did you mean 'temperature'"]),
    ("top-k=5", ["'top-k'", "did you mean 'top_k'"]),
    ("minp=0.1", ["'minp'", "did you mean 'min_p'"]),
    ("top_k=3,top_k=4", ["top_k is given twice"]),
    ("temperature=0", ["'0'", "> 0", "greedy decoding", "not a sampling law to check"]),
    ("temperature=-1", ["'-1'", "> 0"]),
    ("temperature=nan", ["'nan'", "finite"]),
    ("temperature=inf", ["'inf'", "finite"]),
    ("top_k=0", ["'0'", "integer >= 1"]),
    ("top_k=2.5", ["'2.5'", "integer >= 1"]),
    ("top_k=100000000000000000000000", ["100000000000000000000000", "[1, 2147483647]", "leave it off"]),
    ("top_p=0", ["'0'", "(0, 1]"]),
    ("top_p=1.5", ["'1.5'", "(0, 1]"]),
    ("top_p=nan", ["'nan'", "(0, 1]"]),
    ("min_p=-0.1", ["'-0.1'", "[0, 1]"]),
    ("min_p=2", ["'2'", "[0, 1]"]),
    ("temperature=warm", ["'warm'", "a number"]),
    ("top_k", ["'top_k'", "name=value"]),
    ("top_k=3,", ["''", "name=value"]),
    ("=3", ["'=3'", "name=value"]),
])
def test_parse_refuses_in_one_line_naming_the_value(text, words):
    with pytest.raises(VerispecError) as caught:
        Sampling.parse(text)
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("options", [dict(min_p=-0.1), dict(min_p=1.5), dict(min_p=math.nan), dict(min_p=True)])
def test_bad_min_p_is_a_one_line_error(options):
    with pytest.raises(VerispecError, match="min-p") as caught:
        Sampling(**options)
    assert "\n" not in str(caught.value)
