"""The sampling law of a model's next token: temperature, then top-k, then top-p, then min-p, as transformers samples.

Speculative decoding is lossless only when the draft tokens are drawn from exactly the q the verifier is
handed, and when the target law p the verifier preserves is the law plain sampling would use (docs/guides/reference.md,
trap 8: a draft filtered by top-k while the verifier sees the unfiltered q, or bf16 sampling against a
float32 q, silently breaks losslessness). ``Sampling.probabilities`` is that one law, computed in float64
from a model's logits (torch, any float dtype, any device) or from a numpy array (the exact engine's small
vocabularies), and applied identically to the target and the draft; drafting samples from its output and the
verifier receives the same array. Every rule below is written once for both backends.

The order and the comparisons are transformers' (5.x, ``GenerationMixin._get_logits_processor`` and the warpers
of ``generation/logits_process.py``), so plain sampling here has the law of ``generate(do_sample=True)`` with the
same settings (tests/models/test_models.py and tests/models/test_sampling_transform.py hold them equal):

1. temperature: the scores are the logits divided by T (``TemperatureLogitsWarper``; T = 1 leaves them as they are);
2. top-k: a token is kept iff its score is >= the k-th largest score (``TopKLogitsWarper`` removes ``score <
   topk(...)[-1]``): every token tied at the k-th score is kept, so more than k may stay;
3. top-p: with p the softmax of the scores left by top-k, a token is kept iff the mass of the tokens strictly more
   probable than it is < top_p (top_p = 1 keeps all). ``TopPLogitsWarper`` sorts the scores ascending, takes the
   running sums C of p from the least likely up, removes the tokens whose C <= 1 - top_p and always keeps the last
   (most likely) one; without ties its kept set is exactly the one above (a token's C is 1 - the mass after it),
   and verispec computes it with those same sums and comparisons. With ties the two differ: the sort puts tied
   tokens in some order (``torch.sort``, not stable by contract), and a tie group that straddles the boundary is
   kept only in part, the members that happen to sort last (p = [0.4, 0.3, 0.3], top_p = 0.5: transformers keeps
   0.4 and ONE of the 0.3s, which one depends on the sort). verispec keeps the whole group, whose strictly more
   probable mass is < top_p: the rule depends on no order, keeps every token transformers keeps, and differs from
   it only on such straddling groups (all tied maxima are always kept). Computed as: the smallest kept score is
   the score at the first position whose running sum exceeds 1 - top_p (the sums increase, so the removed
   positions are a prefix), and every token with a score at least that is kept. Where the mass above a token
   equals top_p up to rounding (dyadic probabilities against top_p = 0.75, say), the rounded sums and 1 - top_p
   decide, as they do in transformers;
4. min-p: with p the softmax of the scores left by top-p, a token is kept iff p >= min_p * max p
   (``MinPLogitsWarper`` removes ``p < min_p * max p``: a token exactly at the threshold stays). verispec compares
   score - max score >= ln(min_p), the same inequality (p / max p = exp(score - max score)): the decision is then
   one correctly rounded subtraction, the same on numpy, torch and the host, where transformers' products of
   rounded probabilities can differ from it only within a few ulps of the threshold. min_p = 0 (or None) is off;
   min_p = 1 keeps the tied maxima alone.

Each step sees the scores the earlier ones left (removed tokens at -inf), and a softmax renormalises over them; the
law is exp(score - max score) over the kept tokens divided by their sum, exactly 0 elsewhere. A token of logit
-inf (log 0) has probability 0 under every setting. A row of logits that holds a NaN or +inf, or only -inf, has no
law and is never turned into a token (vLLM #53029): numpy logits are refused (``VerispecError``), torch's law row
is all NaN (``probabilities`` says why). Temperature 0 is greedy decoding: all mass on the largest logit (the
smallest token id among tied maxima); the command-line text (``Sampling.parse``) refuses it, since a checker
compares sampling laws and greedy decoding has none to compare.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

import numpy as np

from verispec.errors import VerispecError

#: The parts of a sampling setting's text, in the order ``Sampling.spec`` writes them (and transformers applies them).
SAMPLING_PARTS = ("temperature", "top_k", "top_p", "min_p")
#: The largest top-k a setting takes: engines hold k in int32 (vLLM's top_k tensor), and no vocabulary comes near.
MAX_TOP_K = 2**31 - 1


def read_parts(text: str, names: tuple[str, ...], *, setting: str, kind: str, example: str,
               spelled=lambda name: name) -> dict[str, str]:
    """The ``name=value`` parts of a setting's text, joined by commas (every part optional, in any order, each at
    most once; the empty text has none) -> {name: value text}. Refused in one line (``VerispecError``): a malformed
    part, an unknown name (the nearest of ``names`` to ``spelled(name.lower())`` suggested), a repeated name.
    ``setting`` and ``kind`` name them in the refusals ("the sampling setting", "sampling part")."""
    values: dict[str, str] = {}
    if not text.strip():
        return values
    for part in text.split(","):
        name, equals, value = (piece.strip() for piece in part.partition("="))
        if not equals or not name or not value:
            raise VerispecError(f"cannot read {part.strip()!r} in {setting} {text!r}: write name=value parts joined "
                                f"by commas, e.g. {example}")
        if name not in names:
            nearest = difflib.get_close_matches(spelled(name.lower()), names, n=1, cutoff=0.0)
            raise VerispecError(f"unknown {kind} {name!r} in {text!r}; did you mean {nearest[0]!r}? (the parts are "
                                f"{', '.join(names)})")
        if name in values:
            raise VerispecError(f"{name} is given twice in {setting} {text!r}; give it once")
        values[name] = value
    return values


@dataclass(frozen=True)
class Sampling:
    """Temperature (>= 0; 0 is greedy), top-k (a positive integer or None), top-p (in (0, 1] or None) and min-p (in
    [0, 1] or None; 0 and None are off), applied in that order (the module docstring states each rule)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None

    def __post_init__(self):
        temperature = self.temperature
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(
                temperature) or temperature < 0:
            raise VerispecError(f"temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int)
                                       or not 1 <= self.top_k <= MAX_TOP_K):
            raise VerispecError(f"top-k must be an integer in [1, {MAX_TOP_K}] (or none; a larger k keeps every "
                                f"token: leave it off), got {str(self.top_k)[:40]}")
        if self.top_p is not None and (isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float))
                                       or not 0 < self.top_p <= 1):
            raise VerispecError(f"top-p must lie in (0, 1] (or none), got {self.top_p!r}")
        if self.min_p is not None and (isinstance(self.min_p, bool) or not isinstance(self.min_p, (int, float))
                                       or not 0 <= self.min_p <= 1):
            raise VerispecError(f"min-p must lie in [0, 1] (or none; 0 is off), got {self.min_p!r}")

    # --- the command-line text --------------------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str, *, greedy: bool = False) -> Sampling:
        """The setting of a text ``temperature=T,top_k=K,top_p=P,min_p=M``: every part optional, in any order, each
        at most once; the empty text is plain sampling at temperature 1. Refused in one line (``VerispecError``,
        naming the value and the allowed range): an unknown part (the nearest name suggested), a repeated part, a
        malformed ``name=value``, T <= 0 or not finite (``greedy``: T = 0 allowed, for commands that decode rather
        than compare laws), top_k not an integer >= 1, top_p outside (0, 1], min_p outside [0, 1]."""
        if not isinstance(text, str):
            raise VerispecError(f"a sampling setting is text such as 'temperature=0.7,top_k=20', got {text!r}")
        parts = read_parts(text, SAMPLING_PARTS, setting="the sampling setting", kind="sampling part",
                           example="temperature=0.7,top_k=20,top_p=0.8", spelled=lambda name: name.replace("-", "_"))
        values = {name: _parsed_part(name, value, greedy) for name, value in parts.items()}
        return cls(**values)

    def spec(self) -> str:
        """The canonical text of this setting (``parse`` gives it back; ``parse(..., greedy=True)`` at T = 0): the
        parts that are set, in transformers' order, each number in its shortest exact form."""
        parts = [f"temperature={_number(self.temperature)}"]
        parts += [f"{name}={_number(getattr(self, name))}" for name in SAMPLING_PARTS[1:]
                  if getattr(self, name) is not None]
        return ",".join(parts)

    def as_dict(self) -> dict:
        """The setting as plain values, as records store it: temperature, top_k and top_p, and min_p only where it
        is set (so a record of a setting without min-p reads as it did before min-p existed)."""
        record = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}
        return record if self.min_p is None else {**record, "min_p": self.min_p}

    def describe(self) -> str:
        """One line for reports: 'temperature 0.7, then top-k 20, top-p 0.8, min-p 0.05'."""
        if self.greedy:
            return "greedy decoding (temperature 0)"
        filters = [f"{label} {_number(value)}" for label, value in
                   (("top-k", self.top_k), ("top-p", self.top_p), ("min-p", self.min_p)) if value is not None]
        head = f"temperature {_number(self.temperature)}"
        return f"{head}, then {', '.join(filters)}" if filters else f"plain sampling at {head}"

    # --- the law ----------------------------------------------------------------------------------------------------

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def filters(self) -> bool:
        """Whether the law may leave tokens out (greedy, top-k, top-p below 1, min-p above 0): its support may be
        small."""
        return (self.greedy or self.top_k is not None or (self.top_p is not None and self.top_p < 1)
                or self._min_p_on)

    @property
    def _top_p_on(self) -> bool:
        return self.top_p is not None and self.top_p < 1

    @property
    def _min_p_on(self) -> bool:
        return self.min_p is not None and self.min_p > 0

    def probabilities(self, logits):
        """The sampling law [..., V] in float64 from logits [..., V]: a torch tensor (any float dtype; the law on its
        device) or a numpy array (the law a numpy float64 array), by the same rules. A row holding a NaN or +inf,
        or only -inf, has no law: numpy's are refused (one line); torch's come out all NaN, never a token, without
        a synchronisation on the device (the model paths batch many contexts, and their callers name the one that
        holds it: ``verispec.selector.dataset_file``)."""
        if isinstance(logits, np.ndarray):
            if logits.dtype.kind not in "fiu" or logits.ndim == 0 or logits.shape[-1] == 0:
                raise VerispecError(f"Sampling.probabilities takes real logits [..., V] with V >= 1, got a numpy "
                                    f"array of dtype {logits.dtype} and shape {logits.shape}")
            scores = logits.astype(np.float64)
            _refuse_rows_without_law(scores, ~np.isfinite(_amax(scores)))
        else:
            import torch

            if not isinstance(logits, torch.Tensor):
                raise VerispecError(f"Sampling.probabilities takes logits [..., V] as a torch tensor or a numpy "
                                    f"array, got {type(logits).__name__}")
            if logits.ndim == 0 or logits.shape[-1] == 0:
                raise VerispecError(f"Sampling.probabilities takes logits [..., V] with V >= 1, got shape "
                                    f"{tuple(logits.shape)}")
            narrow = logits.dtype in (torch.float32, torch.bfloat16, torch.float16)  # at most 24 significant bits
            if self.top_k is not None and self.top_k < logits.shape[-1] and narrow and not self.greedy:
                law = self._top_k_law(logits)
                if law is not None:
                    return law
            scores = logits.to(torch.float64)
        # torch: a row without a law comes out all NaN, never a token; no check costs a synchronisation here
        if self.greedy:
            best = _argmax(scores)                                                     # [..., 1]
            return _without_law(_one_hot(scores, best), ~_isfinite(_take(scores, best)))  # NaN ranks first
        if self.temperature != 1:
            scores = scores / self.temperature  # (x / 1 is x exactly: a pass over the vocabulary saved)
        if not self.filters:
            # nothing removed: the masked softmax below, without the mask (a row whose maximum is NaN, +inf or
            # -inf comes out all NaN from the softmax itself)
            return _softmax(scores)
        law = _softmax(_masked(scores, self._removed(scores)))
        return _without_law(law, ~_isfinite(_amax(scores)))

    def _removed(self, scores):
        """Which tokens the filters remove from scores [..., V] (float64, temperature applied; a bool array)."""
        vocab = scores.shape[-1]
        removed = _zeros_like_mask(scores)
        ordered = None  # the scores top-k keeps, ascending, where it keeps exactly k in every row
        if self.top_k is not None and self.top_k < vocab:
            k = self.top_k
            top = _largest_first(scores, k + 1)                                   # [..., k + 1]
            removed = scores < top[..., k - 1:k]
            if not bool((top[..., k] == top[..., k - 1]).any()):
                # no tie at the k-th score: top-p sorts these k instead of the vocabulary (a sort of 151,936 scores
                # a row costs 6 ms on a CPU, 86 ms for a 20-node tree)
                ordered = _flip(top[..., :k])
        if self._top_p_on:
            if ordered is None:
                ordered = _ascending(_masked(scores, removed))
            removed = removed | (scores < self._top_p_floor(ordered))
        if self._min_p_on:
            removed = removed | self._min_p_removed(scores)  # the largest score is never removed above
        return removed

    def _top_p_floor(self, ordered):
        """The smallest score top-p keeps [..., 1], from the scores ``ordered`` [..., n] (ascending, top-k's removed
        ones at -inf): the first position whose running probability sum from the least likely up exceeds 1 - top_p
        (transformers' comparison; the last position always qualifies). Every token scoring at least this is kept,
        the whole of a tie group that straddles the boundary included (module docstring, rule 3)."""
        running = _cumsum(_softmax(ordered))                                      # [..., n], nondecreasing
        removed = _count(running[..., :-1] <= 1 - self.top_p)                    # [..., 1]: a prefix
        return _take(ordered, removed)

    def _top_p_drop(self, ordered):
        """Which of the scores ``ordered`` [..., n] (ascending) top-p removes: those below ``_top_p_floor``."""
        return ordered < self._top_p_floor(ordered)

    def _min_p_removed(self, scores):
        """Which of scores [..., n] (removed ones at -inf) min-p removes: score - max score < ln(min_p)."""
        return scores - _amax(scores) < math.log(self.min_p)

    def _top_k_law(self, logits):
        """``probabilities`` with top-k on logits of at most 24 significant bits, from the k largest logits alone:
        None where ties at the k-th logit keep more than k tokens (the whole-vocabulary path then). Such logits keep
        their order in float64 after division by the temperature (distinct ones differ by at least 2^-24 relative,
        rounding moves them 2^-53), so these k are the tokens and scores the whole-vocabulary path keeps; the law is
        the softmax over them scattered into zeros, equal to that path's to rounding (a sum over k entries instead
        of V; tests/models/test_models.py), in three passes over the vocabulary instead of about ten."""
        import torch

        kept = self._top_k_kept(logits)
        if kept is None:
            return None
        values, ids = kept
        law = torch.zeros(logits.shape, dtype=torch.float64, device=logits.device)
        return law.scatter_(-1, ids, values)

    def _top_k_kept(self, logits):
        """(probabilities [..., k] float64, token ids [..., k]) of ``_top_k_law``'s k tokens, or None where ties at the
        k-th logit keep more than k tokens."""
        import torch

        k = self.top_k
        # k + 1 largest (k < V on this path): more than k logits reach the k-th largest exactly when the (k+1)-th
        # equals it, a test on k + 1 values instead of a [..., V] comparison and count (4x the top-k's own cost);
        # topk ranks NaN above every number, so a row with a NaN shows it here and takes the whole-vocabulary path
        # (which refuses it), and so does a row of -inf (tied at the k-th)
        top = torch.topk(logits, k + 1, dim=-1)                                       # [..., k + 1] largest first
        if bool((top.values[..., k] == top.values[..., k - 1]).any() or torch.isnan(top.values).any()
                or torch.isinf(top.values[..., 0]).any()):
            return None
        scores, ids = top.values[..., :k].to(torch.float64), top.indices[..., :k]    # largest first
        if self.temperature != 1:
            scores = scores / self.temperature
        if self._top_p_on:
            scores = scores.masked_fill(scores < self._top_p_floor(scores.flip(-1)), -math.inf)
        if self._min_p_on:
            scores = scores.masked_fill(self._min_p_removed(scores), -math.inf)
        return torch.softmax(scores, dim=-1), ids

    def compact_probabilities(self, logits):
        """``probabilities(logits)`` of logits [rows, V] as one ``CompactLaw`` a row, (support, values): the tokens
        of nonzero probability ascending and their probabilities, float64 host arrays, what
        ``verispec.simulator.problems.compact_law`` gives of each row of ``probabilities`` (the same values: the same
        softmax over the same k scores), without making the [rows, V] float64 law. Only on ``_top_k_law``'s path
        (top-k below V/2 on torch logits of at most 24 significant bits, no ties at the k-th logit); None
        elsewhere, where the caller takes ``probabilities``. ``support`` gives one row's law without torch's top-k
        too, for the selector's features, but equal to this one to rounding only; a stored law must be
        ``probabilities``'s."""
        if isinstance(logits, np.ndarray):
            return None
        import torch

        narrow = logits.dtype in (torch.float32, torch.bfloat16, torch.float16)
        if self.top_k is None or 2 * self.top_k >= logits.shape[-1] or not narrow or self.greedy:
            return None
        kept = self._top_k_kept(logits)
        if kept is None:
            return None
        values, ids = (array.cpu().numpy() for array in kept)                         # [rows, k] each
        order = np.argsort(ids, axis=-1)
        ids, values = np.take_along_axis(ids, order, -1), np.take_along_axis(values, order, -1)
        laws = []
        for row_ids, row_values in zip(ids, values):
            nonzero = row_values != 0  # the dropped tokens and any probability that underflowed
            laws.append((row_ids[nonzero].astype(np.int64), row_values[nonzero]))
        return laws

    def _top_p_drop_listed(self, ordered: list[float], logits: list[float], device) -> list[bool]:
        """``_top_p_drop`` of a few scores (ascending) as Python floats: their softmax and running sums in float64
        on the host, which differ from torch's by a few ulps (k terms: under 1e-14), so every decision is torch's
        unless a running sum comes within ``TOP_P_MARGIN`` of 1 - top_p; there torch decides, on the scores it
        computes itself from those tokens' ``logits`` on their device, as ``probabilities`` does. On a CPU after a
        model's forward the torch calls cost 0.1-0.2 ms a row (their code is cold); these sums, microseconds."""
        top = ordered[-1]
        weights = [math.exp(score - top) for score in ordered]
        total = math.fsum(weights)
        threshold = 1 - self.top_p
        running, removed = 0.0, 0
        for weight in weights[:-1]:
            running += weight / total
            if abs(running - threshold) <= TOP_P_MARGIN:
                import torch

                scores = torch.tensor(logits, dtype=torch.float64, device=device)
                if self.temperature != 1:
                    scores = scores / self.temperature
                return self._top_p_drop(scores).tolist()
            removed += running <= threshold
        floor = ordered[removed]  # the smallest kept score: ties with it are kept too (module docstring, rule 3)
        return [score < floor for score in ordered]

    def support(self, logits):
        """The support of the law of one row of logits [V] and its probabilities, without a full-vocabulary law:
        (token ids ascending, probabilities) as Python lists (a few tokens, which readers sum over on the host), or
        None where that would take more than one pass over the vocabulary (no top-k: top-p or min-p alone scans
        it, or no filter at all; ties at the k-th score, which keep more than k tokens).

        The kept tokens are exactly those of ``probabilities(logits)``: the same top-k (the k largest logits; the
        division by T keeps their order and their ties), top-p's decisions, from running sums on the host that are
        within 1e-14 of torch's and handed to torch's own softmax and cumsum where one comes within
        ``TOP_P_MARGIN`` of the threshold (a sort is exact, so the k kept scores are ordered in Python), and
        min-p's, the same subtraction and comparison as torch's. Their probabilities are a softmax over the kept
        scores, in float64 on the host: equal to the full law's to rounding (the full softmax sums the vocabulary
        in another order). The k + 1 largest logits come from one reduction over the vocabulary (``largest``)
        instead of ``torch.topk`` over all of it. A row without a law (NaN, +inf, only -inf): None."""
        import torch

        if logits.ndim != 1:
            raise VerispecError(f"Sampling.support takes one row of logits [V], got shape {tuple(logits.shape)}")
        if self.greedy:
            best = int(torch.argmax(logits.to(torch.float64)))  # the first maximum, as ``probabilities``
            return ([best], [1.0]) if math.isfinite(float(logits[best])) else None  # NaN ranks first
        if self.top_k is None or self.top_k >= logits.shape[-1]:
            return None
        values, ids = largest(logits, self.top_k + 1, listed=True)  # [k + 1] each, largest first; ids a list
        values = values.tolist()  # the logits' own values as Python floats (float32 and float64 exactly)
        if values[-1] == values[-2] or not math.isfinite(values[0]):
            # a tie at the k-th score: top-k keeps every tied token; or a row without a law (NaN and +inf come
            # first, a row of -inf tops at -inf), whose full law is NaN
            return None
        # the scores ``probabilities`` compares, divided on the host (x / 1 is x); a division that rounds
        # differently from torch's by an ulp moves no top-k decision (distinct logits stay ordered, equal stay equal)
        scores = values if self.temperature == 1 else [value / self.temperature for value in values]
        kept = sorted(zip(scores[:-1], ids[:-1]))  # least likely first
        if self._top_p_on:
            raw = dict(zip(ids, values))
            drop = self._top_p_drop_listed([score for score, _ in kept], [raw[token] for _, token in kept],
                                           logits.device)
            kept = [pair for pair, dropped in zip(kept, drop) if not dropped]
        top = max(score for score, _ in kept)
        if self._min_p_on:
            floor = math.log(self.min_p)
            kept = [(score, token) for score, token in kept if not score - top < floor]
        kept.sort(key=lambda pair: pair[1])
        weights = [math.exp(score - top) for score, _ in kept]
        total = math.fsum(weights)
        return [token for _, token in kept], [weight / total for weight in weights]


def _parsed_part(name: str, value: str, greedy: bool):
    """One part's value of ``Sampling.parse``'s text, checked against its range (one line naming it)."""
    if name == "top_k":
        try:
            number = int(value)
        except ValueError:
            raise VerispecError(f"top_k must be an integer >= 1, got {value!r}") from None
        if number < 1:
            raise VerispecError(f"top_k must be an integer >= 1, got {value!r}")
        return number
    try:
        number = float(value)
    except ValueError:
        raise VerispecError(f"{name} must be a number, got {value!r}") from None
    if name == "temperature":
        if not math.isfinite(number) or number < 0 or (number == 0 and not greedy):
            zero = (" (temperature 0 is greedy decoding, one token with certainty: not a sampling law to check)"
                    if number == 0 else "")
            raise VerispecError(f"temperature must be a finite number > 0, got {value!r}{zero}")
    elif name == "top_p" and not 0 < number <= 1:
        raise VerispecError(f"top_p must lie in (0, 1] (1 is off), got {value!r}")
    elif name == "min_p" and not 0 <= number <= 1:
        raise VerispecError(f"min_p must lie in [0, 1] (0 is off), got {value!r}")
    return number


def _number(value) -> str:
    """A setting's number in its shortest text that reads back to the same float: 1 for 1.0, 0.7, 1e-05."""
    if isinstance(value, int):
        return str(value)
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


# --- the few array operations the rules are written with: numpy float64 or torch, rows along the last axis --------

def _refuse_rows_without_law(scores, flagged) -> None:
    """Refuse (one line) the first of the rows of scores [..., V] that ``flagged`` [..., 1] marks as having no law:
    a NaN, +inf (the softmax would be NaN), or only -inf (every token of probability 0)."""
    if not bool(flagged.any()):
        return
    flagged = flagged if isinstance(flagged, np.ndarray) else flagged.cpu().numpy()
    where = tuple(int(index) for index in np.argwhere(flagged[..., 0])[0])
    row = scores[where]
    row = row if isinstance(row, np.ndarray) else row.cpu().numpy()
    reason = ("a NaN" if np.isnan(row).any() else "+inf" if np.isposinf(row).any()
              else "only -inf (every token has probability 0)")
    named = "the logits row" if not where else f"logits row {where[0] if len(where) == 1 else where}"
    raise VerispecError(f"{named} holds {reason}: it has no sampling law; give logits with a finite maximum (-inf "
                        "marks a token of probability 0)")


def _without_law(law, flagged):
    """``law`` [..., V] with the rows that ``flagged`` [..., 1] marks (no law: numpy refused them already) all
    NaN, as torch's softmax leaves such a row, whatever a filter or the greedy one-hot made of it."""
    if isinstance(law, np.ndarray):
        return law
    return law.masked_fill(flagged, math.nan)


def _isfinite(values):
    return np.isfinite(values) if isinstance(values, np.ndarray) else values.isfinite()


def _amax(scores):
    if isinstance(scores, np.ndarray):
        return np.max(scores, axis=-1, keepdims=True)
    return scores.amax(dim=-1, keepdim=True)


def _argmax(scores):
    """The first largest entry's index [..., 1] (the smallest id among tied maxima; NaN ranks first)."""
    if isinstance(scores, np.ndarray):
        return np.argmax(scores, axis=-1)[..., None]
    return scores.argmax(dim=-1, keepdim=True)


def _one_hot(scores, index):
    if isinstance(scores, np.ndarray):
        out = np.zeros_like(scores)
        np.put_along_axis(out, index, 1.0, axis=-1)
        return out
    import torch

    return torch.zeros_like(scores).scatter_(-1, index, 1.0)


def _softmax(scores):
    if isinstance(scores, np.ndarray):
        with np.errstate(invalid="ignore"):  # a row without a law (refused before) would come out NaN, as torch's
            weights = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
            return weights / weights.sum(axis=-1, keepdims=True)
    import torch

    return torch.softmax(scores, dim=-1)


def _cumsum(values):
    if isinstance(values, np.ndarray):
        return np.cumsum(values, axis=-1)
    return values.cumsum(dim=-1)


def _count(mask):
    """The number of True entries a row [..., 1] (an index array)."""
    if isinstance(mask, np.ndarray):
        return mask.sum(axis=-1, keepdims=True, dtype=np.int64)
    return mask.sum(dim=-1, keepdim=True)


def _take(values, index):
    if isinstance(values, np.ndarray):
        return np.take_along_axis(values, index, axis=-1)
    return values.gather(-1, index)


def _largest_first(scores, count: int):
    """The ``count`` largest scores of each row [..., count], largest first."""
    if isinstance(scores, np.ndarray):
        vocab = scores.shape[-1]
        part = np.partition(scores, vocab - count, axis=-1)[..., vocab - count:]
        return np.sort(part, axis=-1)[..., ::-1]
    import torch

    return torch.topk(scores, count, dim=-1).values


def _ascending(scores):
    if isinstance(scores, np.ndarray):
        return np.sort(scores, axis=-1)
    return scores.sort(dim=-1).values


def _flip(values):
    if isinstance(values, np.ndarray):
        return values[..., ::-1]
    return values.flip(-1)


def _zeros_like_mask(scores):
    if isinstance(scores, np.ndarray):
        return np.zeros(scores.shape, dtype=bool)
    import torch

    return torch.zeros_like(scores, dtype=torch.bool)


def _masked(scores, removed):
    """``scores`` with the ``removed`` tokens at -inf (a new array)."""
    if isinstance(scores, np.ndarray):
        return np.where(removed, -np.inf, scores)
    return scores.masked_fill(removed, -math.inf)


#: How close a running sum of a support's probabilities may come to 1 - top_p before ``Sampling.support`` asks
#: torch's softmax and cumsum for top-p's decision (its own sums on the host are within 1e-14 of torch's).
TOP_P_MARGIN = 1e-12

#: Entries per block in ``largest``'s one reduction (the block maxima of Qwen's V = 151,936 are 1,187 values).
LARGEST_BLOCK = 128


def largest(row, count: int, *, listed: bool = False):
    """The ``count`` largest entries of a row [V] and their ids, largest first, as ``torch.topk(row, count)``
    gives them (equal entries may come with other ids; ``listed``: the ids as a Python list), from one reduction
    over the row: its block maxima (blocks of ``LARGEST_BLOCK`` entries), then ``topk`` over the ``count`` blocks
    with the largest maxima and the tail. Exact: if a block holding one of the ``count`` largest entries is not
    among those blocks, each of them has a maximum at least as large, so the candidates hold ``count`` entries at
    least that large either way. A float32 row on the CPU goes through the compiled kernel of the same
    reduction (``verispec.native.largest``: one pass, 0.08 against 0.15 ms at Qwen's V with the row cold) where
    this process has it."""
    import torch

    vocab = row.shape[-1]
    blocks = vocab // LARGEST_BLOCK
    if blocks < 4 * count:
        values, ids = torch.topk(row, count)
        return values, (ids.tolist() if listed else ids)
    if row.device.type == "cpu" and row.dtype == torch.float32 and not row.requires_grad and row.ndim == 1:
        from verispec.native import largest as native_largest

        found = native_largest(row.numpy(), count, LARGEST_BLOCK)
        if found is not None:
            values, ids = found
            return torch.from_numpy(values), (ids.tolist() if listed else torch.from_numpy(ids))
    split = blocks * LARGEST_BLOCK
    main = row[:split].reshape(blocks, LARGEST_BLOCK)  # [blocks, width]
    chosen = torch.topk(main.amax(dim=1), count).indices  # [count] blocks
    candidates = main[chosen].view(-1)  # [count * width]
    if split < vocab:  # the tail after the last whole block
        candidates = torch.cat([candidates, row[split:]])
    values, at = torch.topk(candidates, count)
    # a candidate's id from its place (a few Python integers: cheaper than the tensor operations)
    blocks_of = chosen.tolist()
    reach = count * LARGEST_BLOCK
    ids = [blocks_of[place // LARGEST_BLOCK] * LARGEST_BLOCK + place % LARGEST_BLOCK if place < reach
           else split + place - reach for place in at.tolist()]
    return values, (ids if listed else torch.tensor(ids, dtype=torch.int64, device=row.device))
