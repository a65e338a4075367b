"""A latency model for speculative decoding, so that "best" means most tokens per unit of time.

The DDTE paper (Thomas et al. 2026, arXiv 2602.16994, Sec. 3) prices one draft-and-verify block of a delayed
tree a = (K, L1, L2) as

    T(a) = sum_(j < L1) t_q + sum_(j < L2) t_q + t_p(tree size),

one draft forward per depth (the K branches of one depth go in one batched forward) and one target forward
scoring the whole tree. For any drafter this is ``T = depth * t_q + t_p(nodes)`` with ``nodes`` the most nodes a
drawn tree has, root included (``Drafter.max_nodes``), and the expected throughput of a verifier is

    tokens per unit time = E[tau + 1] / T.

Eq. 11 prices every draft forward at one token's t_q, but the forwards that feed a delayed tree's K paths feed
up to K tokens at once, and a forward of K tokens is not free: on a 2-core CPU a forward of 2 tokens took about
twice one token's (the one-token step runs matrix-vector kernels), on an H100 1.14x. A model that measured the
draft at several widths (``draft_sizes`` -> ``draft_times``) prices each forward at its width,

    T = sum_(j < depth) t_q(w_j) + t_p(nodes),

w_j the most tokens the j-th draft forward feeds (``Drafter.draft_widths``); a model without them (one width,
t_q(w) = t_q) is Eq. 11.

Those are the most nodes and widths a tree can have. Decoding forwards fewer: drafts that coincide merge into one node
(a K-path tree at T = 0.7 top-k 20 often draws the same token K times), and t_p(n) jumps at some n on a CPU. A model
that carries the sizes decoding's trees had at a pair's roots (``tree_sizes``: per tree, how often a drawn tree had n
nodes and draft forwards of widths w_j, sampled by ``verispec.selector.tree_sizes``) prices such a tree at its
expected block time over them, E[sum_j t_q(w_j) + t_p(n)]; any other tree keeps its most nodes and widths.

The sizes belong to the sampling setting they were drawn under: at T = 1 drafts coincide less than at T = 0.7, so the
same tree is bigger. ``tree_sizes`` therefore holds one entry per setting, named as the selector names a dataset's
setting (``verispec.selector.roots.sampling_text``: 'T=0.7 top-k=20 top-p=0.8'). A caller that knows the setting of
the roots it prices (the study, the verdict, ``selector train``, ``selector evaluate``) binds the model to it
(``for_setting``), and binding it to a setting it has no sizes for is refused on one line naming the fix (sample them
with experiments/tree_sizes.py), never priced at another setting's sizes. A model not bound prices with its sizes when
it carries one setting's (what a caller that does not know its roots' setting got before sizes named theirs), and
refuses to price a tree when it carries several (which would be a guess). A model without sizes prices every tree at
its most nodes and widths, whatever the setting. A file written before the sizes named their setting (plain
``tree_sizes`` of trees, and ``tree_sizes_source``) still loads: its sizes are of an unknown setting
(``UNKNOWN_SETTING``), which binding refuses for every setting (the dataset its source names does not say its
sampling) until a caller that knows it names it (``naming_unknown``: a selector trained on one setting, or a file's
rewrite).

``LatencyModel`` holds t_q and t_p(n) in one unit: either a cost ratio (synthetic studies: t_q = 1 and
t_p(n) = ratio (1 + per_node (n - 1)), ``from_ratio``) or times measured on a real pair
(``verispec.models.latency.measure_latency``: median forward times by number of new tokens, t_p interpolated
linearly between measured sizes and extrapolated from the last two). A measured model carries the run that timed its
forwards (``measured``: ``verispec.files.provenance.run_record`` with its ``seconds``), so that a verdict that prices
verification beside them can say whether both were timed in one run on one box
(``verispec.selector.verification_cost.pricing_run``).
"""

from __future__ import annotations

import bisect
import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from verispec.errors import VerispecError
from verispec.files.io import OutputKind, read_user_file

#: Largest latency model file read ('verispec latency --out' writes a few hundred bytes; with tree sizes of a few
#: settings, tens of kilobytes).
MAX_LATENCY_FILE_BYTES = 1 << 20

#: The setting of tree sizes read from a file that did not name it (written before issue 66's settings).
UNKNOWN_SETTING = ""


class LatencyError(VerispecError):
    """A latency model that cannot be built or read."""


def _positive(value, what: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
            value < 0 or (value == 0 and not allow_zero):
        raise LatencyError(f"{what} must be a {'non-negative' if allow_zero else 'positive'} finite number, "
                           f"got {value!r}")
    return float(value)


def _check_curve(sizes, times, name: str, what_sizes: str, what_time: str) -> None:
    if not sizes or len(sizes) != len(times):
        raise LatencyError(f"{name} needs one time per {what_sizes[:-1]}, and at least one {what_sizes[:-1]}")
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes) or list(sizes) != sorted(set(sizes)):
        raise LatencyError(f"{what_sizes} must be increasing positive integers, got {list(sizes)}")
    for value in times:
        _positive(value, what_time)


def _interpolate(sizes, times, n: int) -> float:
    """Linear between measured sizes, extrapolated from the two nearest outside them, never below the smallest
    measured time."""
    if len(sizes) == 1:
        return times[0]
    index = min(max(bisect.bisect_left(sizes, n), 1), len(sizes) - 1)
    low, high = index - 1, index
    slope = (times[high] - times[low]) / (sizes[high] - sizes[low])
    return max(min(times), times[low] + slope * (n - sizes[low]))


@dataclass(frozen=True)
class LatencyModel:
    """t_q (``draft_step``: one draft forward of one token), t_p(n) (``target_sizes`` -> ``target_times``, n tree
    nodes) and optionally t_q(w) (``draft_sizes`` -> ``draft_times``, a draft forward of w tokens; its first size
    is 1 and its first time ``draft_step``), in one ``unit``."""

    draft_step: float
    target_sizes: tuple[int, ...]
    target_times: tuple[float, ...]
    unit: str = "draft step"
    source: str = ""
    draft_sizes: tuple[int, ...] = (1,)
    draft_times: tuple[float, ...] = ()
    #: ((setting, ((tree spec, ((count, nodes, widths), ..)), ..), source), ..): per sampling setting, the sizes of
    #: decoding's drawn trees under it and where they were sampled (dataset, roots, combs, seed); module docstring
    tree_sizes: tuple = ()
    #: the sampling setting whose sizes ``drafter_time`` prices with (``for_setting``; never written to a file)
    setting: str | None = None
    #: the run that timed the forwards ('verispec latency': command, commit, date, machine, seconds), None when not
    #: recorded (a cost ratio, or a file written before issue 78); not part of the model's identity
    measured: dict | None = field(default=None, compare=False, hash=False)

    def __post_init__(self):
        _positive(self.draft_step, "the draft step time t_q")
        _check_curve(self.target_sizes, self.target_times, "t_p", "tree sizes", "a target forward time t_p(n)")
        if not self.draft_times and tuple(self.draft_sizes) == (1,):  # Eq. 11: one width, t_q
            object.__setattr__(self, "draft_times", (self.draft_step,) * len(self.draft_sizes))
        _check_curve(self.draft_sizes, self.draft_times, "t_q(w)", "draft widths", "a draft forward time t_q(w)")
        if self.draft_sizes[0] != 1 or self.draft_times[0] != self.draft_step:
            raise LatencyError(f"t_q(w) must start at width 1 with t_q = {self.draft_step!r}, got width "
                               f"{self.draft_sizes[0]!r} at {self.draft_times[0]!r}")
        object.__setattr__(self, "tree_sizes", _checked_settings(self.tree_sizes))
        if self.setting is not None and self.tree_sizes and self.setting not in self.sized_settings:
            raise LatencyError(f"the latency model is bound to the setting {self.setting!r} but carries tree sizes "
                               f"for {_names(self.sized_settings)} only; bind it with for_setting")

    @classmethod
    def from_ratio(cls, ratio: float, per_node: float = 0.0) -> LatencyModel:
        """t_q = 1, t_p(n) = ratio (1 + per_node (n - 1)): a target forward costs ``ratio`` draft steps, and each
        tree node beyond the first adds the fraction ``per_node`` of it (0: verifying a tree costs what one
        token does, the memory-bound regime of a GPU)."""
        ratio = _positive(ratio, "the cost ratio t_p / t_q")
        per_node = _positive(per_node, "the per-node cost", allow_zero=True)
        return cls(1.0, (1, 2), (ratio, ratio * (1 + per_node)), "draft step",
                   f"cost ratio t_p/t_q = {ratio:g}, per node {per_node:g}")

    def target_time(self, nodes: int) -> float:
        """t_p(n): linear between measured sizes, extrapolated from the two nearest outside them (never
        below the smallest measured time)."""
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise LatencyError(f"a tree has at least one node, got {nodes!r}")
        return _interpolate(self.target_sizes, self.target_times, nodes)

    def draft_time(self, width: int) -> float:
        """t_q(w): one draft forward of w tokens, interpolated as t_p (t_q at every width when only one was
        measured: Eq. 11)."""
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise LatencyError(f"a draft forward feeds at least one token, got {width!r}")
        return _interpolate(self.draft_sizes, self.draft_times, width)

    @property
    def flat_draft(self) -> bool:
        """Whether every draft forward costs t_q whatever its width (Eq. 11 as written)."""
        return len(set(self.draft_times)) == 1

    def block_time(self, depth: int, nodes: int, widths=None) -> float:
        """T = sum_j t_q(w_j) + t_p(nodes): one draft-and-verify block of ``depth`` draft forwards feeding
        ``widths`` tokens each (one each when not given: depth t_q + t_p, Eq. 11)."""
        if widths is None:
            return depth * self.draft_step + self.target_time(nodes)
        widths = tuple(widths)
        if len(widths) != depth:
            raise LatencyError(f"a block of {depth} draft forwards needs {depth} widths, got {list(widths)}")
        return sum(self.draft_time(width) for width in widths) + self.target_time(nodes)

    @property
    def sized_settings(self) -> tuple[str, ...]:
        """The sampling settings whose tree sizes the model carries (``UNKNOWN_SETTING`` for an old file's)."""
        return tuple(setting for setting, _, _ in self.tree_sizes)

    def sizes_source(self, setting: str) -> str:
        """Where the sizes of ``setting`` were sampled ('' when the model carries none for it)."""
        return next((source for name, _, source in self.tree_sizes if name == setting), "")

    def for_setting(self, setting: str) -> LatencyModel:
        """This model bound to the sampling setting ``setting`` (its ``sampling_text``), whose trees it then prices at
        that setting's sizes. A model without tree sizes is returned as it is (every tree at its most nodes and
        widths). LatencyError (one line) when the model carries sizes but none for ``setting``: another setting's
        trees are other sizes, and an old file's sizes (``UNKNOWN_SETTING``) are of no known setting."""
        if not isinstance(setting, str) or not setting:
            raise LatencyError(f"a sampling setting is named by its text, e.g. 'T=0.7 top-k=20 top-p=0.8', got "
                               f"{setting!r}")
        if not self.tree_sizes or setting == self.setting:
            return self
        if setting in self.sized_settings:
            return replace(self, setting=setting)
        fix = (f"sample them for {setting} with 'python experiments/tree_sizes.py --dataset DATASET (one of {setting}) "
               "--latency FILE --out FILE', which adds them beside any other setting's")
        if self.sized_settings == (UNKNOWN_SETTING,):
            raise LatencyError(f"the latency model's tree sizes do not name the sampling setting they were sampled "
                               f"under (a file written before they did; sampled on "
                               f"{self.sizes_source(UNKNOWN_SETTING) or 'an unnamed dataset'!r}), so they price no "
                               f"setting's trees, {setting} included; {fix}")
        raise LatencyError(f"the latency model carries tree sizes for {_names(self.sized_settings)} only, not for "
                           f"{setting} (trees at another sampling setting have other sizes); {fix}")

    def naming_unknown(self, setting: str) -> LatencyModel:
        """This model with an old file's sizes of an unknown setting named as ``setting``'s, by a caller that knows
        where they were sampled (the model is returned as it is when it carries no such sizes)."""
        if not isinstance(setting, str) or not setting:
            raise LatencyError(f"tree sizes are named by their sampling setting's text, got {setting!r}")
        if self.sized_settings != (UNKNOWN_SETTING,):
            return self
        _, trees, source = self.tree_sizes[0]
        return replace(self, tree_sizes=((setting, trees, source),), setting=None)

    def check_can_add(self, setting: str) -> None:
        """LatencyError (one line) unless ``with_tree_sizes`` can add sizes for ``setting``: a named setting, and a
        model whose sizes (if any) name theirs (an old file's of an unknown setting could be ``setting``'s or not)."""
        if not isinstance(setting, str) or not setting:
            raise LatencyError(f"tree sizes are added for a named sampling setting, got {setting!r}")
        if UNKNOWN_SETTING in self.sized_settings:
            raise LatencyError(f"the latency model carries tree sizes that do not name their sampling setting (a file "
                               f"written before they did; sampled on {self.sizes_source(UNKNOWN_SETTING)!r}), so "
                               f"sizes for {setting} cannot go beside them; add them to the model without sizes it was "
                               "made from, or rewrite its sizes under their setting (LatencyModel.naming_unknown)")

    def with_tree_sizes(self, setting: str, trees, source: str) -> LatencyModel:
        """This model with ``trees`` ({tree spec: [[count, nodes, widths], ..]}) as the sizes of ``setting``, beside
        the other settings' (which stay as they are); a setting it already carried gets the new sizes. LatencyError
        where the model carries an old file's sizes of an unknown setting (they could be ``setting``'s or not)."""
        self.check_can_add(setting)
        try:
            rows = _tree_rows(trees)
        except (TypeError, ValueError) as error:
            raise LatencyError(f"tree sizes for {setting}: {error}") from None
        kept = tuple(entry for entry in self.tree_sizes if entry[0] != setting)
        return replace(self, tree_sizes=(*kept, (setting, rows, str(source))), setting=None)

    def drafter_time(self, drafter) -> float:
        """T of one block of ``drafter``: its expected block time over the sizes its trees had in decoding under the
        bound setting (``for_setting``; not bound: the one setting the model carries sizes for) when the model
        carries them, else its most nodes and widths. LatencyError (one line) where the model carries several
        settings' sizes but is bound to none (which setting's trees it prices is unknown), or where the sizes could
        not be this drafter's (more nodes, another depth or wider forwards than its trees can have)."""
        if not self.tree_sizes:
            return self.block_time(drafter.depth, drafter.max_nodes, drafter.draft_widths)
        if self.setting is None and len(self.tree_sizes) > 1:
            raise LatencyError(f"the latency model carries tree sizes for {_names(self.sized_settings)}: say which "
                               "sampling setting's trees it prices (LatencyModel.for_setting, a dataset's setting)")
        setting = self.tree_sizes[0][0] if self.setting is None else self.setting
        trees = next(trees for name, trees, _ in self.tree_sizes if name == setting)
        sizes = dict(trees).get(drafter.spec)
        if sizes is None:
            return self.block_time(drafter.depth, drafter.max_nodes, drafter.draft_widths)
        total = weight = 0.0
        for count, nodes, widths in sizes:
            if nodes > drafter.max_nodes or len(widths) != drafter.depth or \
                    any(w > most for w, most in zip(widths, drafter.draft_widths)):
                raise LatencyError(f"the latency model's tree sizes for {drafter.spec} ({nodes} nodes, draft widths "
                                   f"{list(widths)}) are not a tree of it (at most {drafter.max_nodes} nodes, widths "
                                   f"{list(drafter.draft_widths)}); sample them again for this grid")
            total += count * self.block_time(len(widths), nodes, widths)
            weight += count
        return total / weight

    def throughput(self, block_efficiency: float, drafter) -> float:
        """Expected tokens per unit time: E[tau + 1] / T."""
        return float(block_efficiency) / self.drafter_time(drafter)

    def plain_throughput(self) -> float:
        """Tokens per unit time of plain decoding: one target forward of one node per token."""
        return 1.0 / self.target_time(1)

    def as_dict(self) -> dict:
        data = {"draft_step": self.draft_step, "target_sizes": list(self.target_sizes),
                "target_times": list(self.target_times), "unit": self.unit, "source": self.source}
        if not self.flat_draft or len(self.draft_sizes) > 1:
            data.update(draft_sizes=list(self.draft_sizes), draft_times=list(self.draft_times))
        if self.sized_settings == (UNKNOWN_SETTING,):  # an old file's sizes: written back as it wrote them
            _, trees, source = self.tree_sizes[0]
            data.update(tree_sizes=_trees_dict(trees), tree_sizes_source=source)
        elif self.tree_sizes:
            data.update(tree_sizes={setting: {"source": source, "trees": _trees_dict(trees)}
                                    for setting, trees, source in self.tree_sizes})
        if self.measured is not None:
            data.update(measured=self.measured)
        return data

    @classmethod
    def from_dict(cls, data) -> LatencyModel:
        """A model from ``as_dict``'s keys; a file without draft_sizes (written before widths were measured) is
        Eq. 11's flat draft step, one whose tree_sizes map trees to sizes (written before they named their setting)
        carries them as ``UNKNOWN_SETTING``'s. The model read is bound to no setting."""
        try:
            draft = {}
            if "draft_sizes" in data or "draft_times" in data:
                draft = {"draft_sizes": tuple(int(n) for n in data["draft_sizes"]),
                         "draft_times": tuple(float(t) for t in data["draft_times"])}
            return cls(float(data["draft_step"]), tuple(int(n) for n in data["target_sizes"]),
                       tuple(float(t) for t in data["target_times"]), str(data.get("unit", "")),
                       str(data.get("source", "")), **draft, tree_sizes=_read_settings(data),
                       measured=_read_measured(data.get("measured")))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise LatencyError(f"not a latency model (draft_step, target_sizes, target_times, optionally "
                               f"draft_sizes, draft_times and tree_sizes): {error}") from None

    @classmethod
    def load(cls, path: str | Path) -> LatencyModel:
        text = read_user_file(path, limit=MAX_LATENCY_FILE_BYTES, what="the latency model", error=LatencyError,
                              why="a measured model is a few hundred bytes")
        try:
            return cls.from_dict(json.loads(text))
        except (json.JSONDecodeError, RecursionError) as error:
            raise LatencyError(f"cannot read the latency model {str(path)!r}: "
                               f"{error if isinstance(error, json.JSONDecodeError) else 'nested too deeply'}") from None


def _read_measured(record) -> dict | None:
    """A file's ``measured`` run record, or None where it has none; anything but a run record (a dict with its date
    and machine) is refused as the rest of a malformed file is."""
    if record is None:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("date"), str) or \
            not isinstance(record.get("machine"), dict):
        raise TypeError("'measured' must be the run record of the forwards' timing (its date and machine)")
    return record


def _names(settings) -> str:
    return ", ".join("an unknown setting" if name == UNKNOWN_SETTING else name for name in settings)


def _tree_rows(trees) -> tuple:
    """{spec: [[count, nodes, widths], ..]} (a file's, or ``verispec.selector.tree_sizes.as_tree_sizes``'s) as
    ((spec, ((count, nodes, widths), ..)), ..)."""
    if not isinstance(trees, dict):
        raise TypeError(f"tree_sizes must map a tree to its sizes, got {type(trees).__name__}")
    return tuple((str(spec), tuple((int(count), int(nodes), tuple(int(w) for w in widths))
                                   for count, nodes, widths in rows)) for spec, rows in trees.items())


def _trees_dict(trees) -> dict:
    return {spec: [[count, nodes, list(widths)] for count, nodes, widths in rows] for spec, rows in trees}


def _read_settings(data) -> tuple:
    """``LatencyModel.tree_sizes`` from a file's ``tree_sizes``: {setting: {"source", "trees"}} (as_dict), or an
    old file's {spec: rows} with its ``tree_sizes_source`` (``UNKNOWN_SETTING``'s sizes)."""
    sizes = data.get("tree_sizes", {})
    if not isinstance(sizes, dict):
        raise TypeError(f"tree_sizes must map a sampling setting (or, in an old file, a tree) to its sizes, got "
                        f"{type(sizes).__name__}")
    if not sizes:
        return ()
    if "tree_sizes_source" in data or any(isinstance(rows, list) for rows in sizes.values()):
        return ((UNKNOWN_SETTING, _tree_rows(sizes), str(data.get("tree_sizes_source", ""))),)
    return tuple((str(setting), _tree_rows(entry["trees"]), str(entry.get("source", "")))
                 for setting, entry in sizes.items())


def _checked_settings(entries) -> tuple:
    """``LatencyModel.tree_sizes`` as tuples, or LatencyError (one line): each setting once, an unknown setting's
    (an old file's) alone, and each setting's trees checked (``_checked_tree_sizes``)."""
    checked = []
    for setting, trees, source in entries:
        if not isinstance(setting, str):
            raise LatencyError(f"tree_sizes are named by their sampling setting's text, got {setting!r}")
        checked.append((setting, _checked_tree_sizes(trees, setting), str(source)))
    names = [setting for setting, _, _ in checked]
    if len(set(names)) != len(names) or (UNKNOWN_SETTING in names and len(names) > 1):
        raise LatencyError(f"tree_sizes name each sampling setting once (and an old file's sizes of an unknown "
                           f"setting alone), got {_names(names)}")
    return tuple(checked)


def _checked_tree_sizes(sizes, setting: str = UNKNOWN_SETTING) -> tuple:
    """One setting's trees as tuples, or LatencyError (one line) naming the first bad entry: every count and
    width a positive integer, every tree at least its root, a listed tree with at least one size, and at least one
    tree."""
    checked = []
    where = "" if setting == UNKNOWN_SETTING else f" at {setting}"
    for spec, rows in sizes:
        rows = tuple((count, nodes, tuple(widths)) for count, nodes, widths in rows)
        bad = [row for row in rows if any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                          for v in (row[0], row[1], *row[2]))]
        if not rows or bad:
            raise LatencyError(f"tree_sizes of {spec!r}{where}: "
                               f"{'no sizes' if not rows else f'bad entry {list(bad[0])}'}; "
                               "each entry is [count >= 1, nodes >= 1, [width >= 1 per draft forward]]")
        checked.append((spec, rows))
    if not checked:
        raise LatencyError(f"tree_sizes{where or ' of an unknown setting'} list no tree; leave the setting out")
    return tuple(checked)


def measured_pair(model: LatencyModel) -> str | None:
    """The pair ``model`` was measured on, as ``verispec latency`` names it in the source ("measured on NAME (...)");
    None for a model that does not say (made by hand, or by ratio)."""
    match = re.match(r"measured on (\S+) \(", model.source)
    return match.group(1) if match else None


def check_latency_pair(model: LatencyModel, pair: str, what: str) -> None:
    """LatencyError (one line) when ``model`` says it was measured on a pair other than ``pair``: its times are
    another pair's forwards (a model that names no pair is taken as given)."""
    measured = measured_pair(model)
    if measured is not None and measured != pair:
        raise LatencyError(f"{what} was measured on the pair {measured!r}, not {pair!r}; measure this pair's with "
                           f"'verispec latency --pair {pair} --out FILE'")


def throughput_unit(model: LatencyModel) -> str:
    """The unit of E[tau+1]/T under ``model``: tokens per t_q where the model's times are in draft steps
    (t_q = 1: T = 4.5 means four and a half draft steps' time), else tokens per the model's unit (ms)."""
    return "tokens per t_q" if model.draft_step == 1 and model.unit == "draft step" else f"tokens per {model.unit}"


def is_latency_file(path: str | Path) -> bool:
    """Whether ``path`` holds a latency model ``LatencyModel.load`` reads ('verispec latency --out' wrote it)."""
    try:
        LatencyModel.load(path)
    except LatencyError:
        return False
    return True


def latency_file_marked(path: str | Path) -> bool:
    """Whether ``path`` carries the ``written_by`` marker of a latency model 'verispec latency --out' wrote
    (``verispec.files.provenance``): what it may replace without --overwrite."""
    from verispec.files.io import json_marker
    from verispec.files.provenance import LATENCY, is_marked

    return is_marked(json_marker(path, MAX_LATENCY_FILE_BYTES), LATENCY)


#: What 'verispec latency --out' writes (``verispec.files.io.check_output``).
LATENCY_FILE = OutputKind("verispec latency model", latency_file_marked, is_latency_file, "latency.json")

__all__ = ["LATENCY_FILE", "UNKNOWN_SETTING", "LatencyError", "LatencyModel", "check_latency_pair", "is_latency_file",
           "measured_pair", "throughput_unit"]
