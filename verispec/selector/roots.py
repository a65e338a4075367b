"""The roots of the delay selector's datasets: ``Root`` (a context whose last token is a block's root, its group and
sampling setting; ``parse_setting`` reads a setting's command-line text, ``sampling_text`` writes it in one line) and
where roots come from: ``trace_roots`` (a model pair's plain-sampling traces, a root every
``every`` tokens) and ``synthetic_roots`` (prefixes of the sweep's seeded synthetic problems). Labelling them and
the dataset built from them are ``verispec.selector.dataset``'s."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from verispec.errors import VerispecError, describe
from verispec.files.io import ResultStore
from verispec.models.sampling import Sampling
from verispec.selector.dataset_file import DatasetError


def _sampling_dict(sampling: Sampling) -> dict:
    return {"temperature": float(sampling.temperature), "top_k": sampling.top_k,
            "top_p": None if sampling.top_p is None else float(sampling.top_p)}


@dataclass(frozen=True)
class Root:
    """One root: ``context`` (token ids, the last one is the block's root; at least 2 tokens), its ``group``
    and ``sampling``, and where its laws come from: ``pair`` (a model pair's name) or ``problem`` (a synthetic
    family's parameters: family, vocab, divergence, temperature, concentration, seed)."""

    context: tuple[int, ...]
    group: str
    sampling: Sampling = field(default_factory=Sampling)
    pair: str | None = None
    problem: Mapping | None = None

    def __post_init__(self):
        context = tuple(int(token) for token in self.context)
        if len(context) < 2:
            raise DatasetError(f"a root needs a context of at least 2 tokens (the previous one and the root), got "
                               f"{len(context)}")
        object.__setattr__(self, "context", context)
        if (self.pair is None) == (self.problem is None):
            raise DatasetError("a root comes from a pair (pair=NAME) or from a synthetic problem (problem=...), "
                               "exactly one of them")
        if not isinstance(self.sampling, Sampling):
            raise DatasetError(f"a root's sampling is a Sampling, got {type(self.sampling).__name__}")
        object.__setattr__(self, "group", str(self.group))
        if self.problem is not None:
            object.__setattr__(self, "problem", dict(self.problem))

    @property
    def kind(self) -> str:
        return "model" if self.pair is not None else "synthetic"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "context": list(self.context), "group": self.group,
                "sampling": _sampling_dict(self.sampling), "pair": self.pair,
                "problem": None if self.problem is None else dict(self.problem)}

    @classmethod
    def from_dict(cls, data: Mapping) -> Root:
        sampling = data["sampling"]
        return cls(tuple(data["context"]), data["group"],
                   Sampling(sampling["temperature"], sampling["top_k"], sampling["top_p"]),
                   data.get("pair"), data.get("problem"))

    def key(self) -> str:
        """The root's store key: its description as canonical JSON."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))


def sampling_text(sampling: Mapping) -> str:
    """A sampling setting as recorded in datasets and selectors ({"temperature", "top_k", "top_p"}) in one line,
    e.g. 'T=0.7 top-k=20 top-p=0.8' (filters that are off are left out)."""
    parts = [f"T={sampling.get('temperature', 1.0):g}"]
    if sampling.get("top_k"):
        parts.append(f"top-k={sampling['top_k']}")
    if sampling.get("top_p") not in (None, 1.0):
        parts.append(f"top-p={sampling['top_p']:g}")
    return " ".join(parts)


def parse_setting(text: str) -> Sampling:
    """A sampling setting from its command-line text, 'temperature=0.7,top_k=20,top_p=0.8' (also
    'T=0.7,k=20,p=0.8'; left-out filters are off, the temperature 1): what ``--sampling`` of ``selector dataset``
    and the scripts that rebuild its settings read."""
    names = {"temperature": "temperature", "t": "temperature", "top_k": "top_k", "top-k": "top_k", "k": "top_k",
             "top_p": "top_p", "top-p": "top_p", "p": "top_p"}
    values: dict = {}
    for part in text.split(","):
        key, _, value = part.strip().partition("=")
        name = names.get(key.strip().lower())
        if name is None or not value.strip():
            raise VerispecError(f"cannot read {part.strip()!r} of the sampling setting {text!r}; write e.g. "
                                "temperature=0.7,top_k=20,top_p=0.8")
        try:
            values[name] = int(value) if name == "top_k" else float(value)
        except ValueError:
            raise VerispecError(f"{key.strip()} must be a number in the sampling setting {text!r}, got "
                                f"{value.strip()!r}") from None
    return Sampling(values.get("temperature", 1.0), values.get("top_k"), values.get("top_p"))


def _check_samplings(samplings) -> list[Sampling]:
    if isinstance(samplings, Sampling):
        samplings = [samplings]
    samplings = list(samplings)
    if not samplings:
        raise DatasetError("the sampling settings are empty; give at least one (e.g. Sampling(1.0))")
    for sampling in samplings:
        if not isinstance(sampling, Sampling):
            raise DatasetError(f"a sampling setting is a verispec.models.Sampling, got {type(sampling).__name__}")
    return samplings


def _named_prompts(prompts) -> list[tuple[str, object]]:
    """(group, prompt) pairs from a mapping, a sequence of (group, prompt) pairs, or a sequence of prompts."""
    if isinstance(prompts, Mapping):
        named = [(str(name), prompt) for name, prompt in prompts.items()]
    elif isinstance(prompts, (str, bytes)) or not hasattr(prompts, "__iter__"):
        raise DatasetError(f"prompts must be a sequence of prompts (text or token ids), got {describe(prompts)}"[:200])
    else:
        named = []
        for index, item in enumerate(prompts):
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                named.append(item)
            else:
                named.append((f"prompt:{index}", item))
    if not named:
        raise DatasetError("the prompt set is empty; give at least one prompt")
    return named


def _derived_seed(*parts) -> int:
    """A seed in [0, 2^63) derived from ``parts`` (stable across processes and runs)."""
    digest = hashlib.sha256(json.dumps(list(parts), sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def trace_roots(pair, prompts, samplings, *, every: int = 16, max_new_tokens: int, seed: int = 0,
                store: ResultStore | None = None, batch_size: int = 8, progress: bool = False,
                first_root: int = 0, stored_only: bool = False) -> list[Root]:
    """Roots every ``every`` tokens of plain target sampling (``sample_target``) from each prompt under each
    sampling setting: the contexts prompt + the first f, f + every, f + 2 every, .. sampled tokens, f =
    ``first_root`` (at most ``max_new_tokens``; a context ending in an end token is left out: no block follows
    it). ``prompts``: texts or token-id lists, (group, prompt) pairs,
    or a mapping group -> prompt (the group of unnamed prompts is 'prompt:i'). Each trace is seeded from
    (seed, prompt group, setting), so adding prompts or settings leaves the others' roots unchanged.

    ``store``: a ``ResultStore`` (``verispec selector dataset`` keeps ``OUT.traces.json``) holding finished
    traces, keyed on the pair, prompt text, setting, seed and length: a resumed build reuses them instead of
    decoding again (a trace of the 1.5B target on a CPU is about 0.5 s a token). The missing traces are decoded
    ``batch_size`` prompts at a time, each from its own seed (``verispec.selector.traces.sampled_traces``: the same
    tokens as ``sample_target``), and stored as each batch finishes. ``progress``: a tqdm bar. ``stored_only``: every
    trace must be in ``store`` already (a relabel reuses its dataset's traces): a missing one is refused before
    any decoding."""
    from verispec.models.prompts import check_prompt_lengths
    from verispec.selector.traces import sampled_traces

    samplings = _check_samplings(samplings)
    for name, value, least in (("every", every, 1), ("max_new_tokens", max_new_tokens, 1), ("seed", seed, 0),
                               ("batch_size", batch_size, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise DatasetError(f"{name} must be an integer >= {least}, got {describe(value)}")
    if isinstance(first_root, bool) or not isinstance(first_root, (int, np.integer)) \
            or not 0 <= first_root <= max_new_tokens:
        raise DatasetError(f"first_root must be an integer in [0, max_new_tokens = {max_new_tokens}] (a root after "
                           f"that many sampled tokens), got {describe(first_root)}")
    named = check_prompt_lengths(pair, _named_prompts(prompts), int(max_new_tokens))  # refused before any decoding
    stops, roots, keyed = pair.eos_token_ids, [], []
    cells = [(group, prompt, index, sampling) for group, prompt in named for index, sampling in enumerate(samplings)]
    for group, prompt, index, sampling in cells:
        trace_seed = _derived_seed("trace", int(seed), group, index)
        key = json.dumps({"pair": pair.name, "group": group, "prompt": prompt if isinstance(prompt, str) else
                          [int(token) for token in prompt], "sampling": _sampling_dict(sampling), "seed": trace_seed,
                          "max_new_tokens": int(max_new_tokens)}, sort_keys=True)
        keyed.append((key, prompt, sampling, trace_seed))
    if stored_only:
        _check_stored(keyed, cells, store)
    traces = sampled_traces(pair, keyed, int(max_new_tokens), store=store, batch_size=int(batch_size),
                            progress=progress)
    for (group, _, _, sampling), (prompt_length, tokens) in zip(cells, traces):
        for position in range(prompt_length + int(first_root), len(tokens) + 1, every):
            context = tokens[:position]
            if len(context) < 2 or context[-1] in stops:
                continue
            roots.append(Root(tuple(context), group, sampling, pair=pair.name))
    if not roots:
        raise DatasetError("the traces hold no root (every prompt is a single token, or ended at once); give longer "
                           "prompts or more tokens")
    return roots


def _check_stored(keyed, cells, store: ResultStore | None) -> None:
    missing = [cell for (key, *_), cell in zip(keyed, cells) if store is None or not store.done(key)]
    if missing:
        group, _, _, sampling = missing[0]
        raise DatasetError(f"{len(missing)} of the command's {len(cells)} traces are not in the dataset's trace store "
                           f"(the first: {group} at {_sampling_dict(sampling)}); a relabel labels the roots the file "
                           "was built from: give the prompts, --sampling, --trace-tokens and --seed it was built with")


def synthetic_roots(family: str, vocab: int, seeds, *, divergence=0.5, temperature: float = 1.0,
                    concentration: float = 1.0, prefix_length: int = 2, roots_per_seed: int = 1) -> list[Root]:
    """Roots of the sweep's synthetic families (``verispec.study.grid.FAMILIES``): for each seed, the problem of
    ``verispec.study.cells.build_problem`` with these knobs (``divergence`` may be a sequence, cycled over the seeds),
    and ``roots_per_seed`` prefixes of ``prefix_length`` tokens drawn from its target law (a stream derived from
    the seed). The group of a root is its problem ('family/V=3/seed=7'); its sampling is the temperature knob."""
    from verispec.study.cells import build_problem
    from verispec.study.grid import FAMILIES

    if family not in FAMILIES:
        raise DatasetError(f"unknown synthetic family {family!r}; use one of {', '.join(FAMILIES)}")
    seeds = list(seeds)
    if not seeds:
        raise DatasetError("the seed set is empty; give at least one seed")
    divergences = list(divergence) if isinstance(divergence, (list, tuple)) else [divergence]
    if not divergences:
        raise DatasetError("the divergences are empty; give at least one")
    for name, value, least in (("prefix_length", prefix_length, 2), ("roots_per_seed", roots_per_seed, 1),
                               ("vocab", vocab, 2)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise DatasetError(f"{name} must be an integer >= {least}, got {describe(value)}")
    roots = []
    for index, seed in enumerate(seeds):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise DatasetError(f"a seed must be a non-negative integer, got {describe(seed)}")
        cell = {"family": family, "vocab": int(vocab), "divergence": float(divergences[index % len(divergences)]),
                "temperature": float(temperature), "concentration": float(concentration), "seed": int(seed)}
        try:
            problem = build_problem(cell, prefix_length)
        except VerispecError as error:  # SweepError included
            raise DatasetError(f"synthetic roots of {family} seed {seed}: {error}") from None
        rng = np.random.default_rng(_derived_seed("synthetic roots", cell))
        for _ in range(roots_per_seed):
            prefix: list[int] = []
            for _ in range(prefix_length):
                law = np.asarray(problem.target(tuple(prefix)), dtype=np.float64)
                prefix.append(int(rng.choice(len(law), p=law / law.sum())))
            roots.append(Root(tuple(prefix), f"{family}/V={vocab}/seed={seed}", Sampling(float(temperature)),
                              problem=cell))
    return roots


def dataset_pair_roots(path) -> tuple:
    """(the dataset at ``path``, its roots): a pair's roots, each with its whole context and sampling (the ``key``
    column); a dataset of synthetic roots is refused on one line (what the experiments at a pair's roots read)."""
    from verispec.selector.dataset_file import Dataset

    dataset = Dataset.load(path)
    roots = []
    for key in dataset.key.tolist():
        try:
            roots.append(Root.from_dict(json.loads(key)))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # a key that is no root's
            raise DatasetError(f"{str(path)!r}: its key column holds {describe(str(key)[:80])}, not a root's "
                               "description; give a dataset that 'verispec selector dataset' built") from None
    if not roots or any(root.kind != "model" for root in roots):
        raise DatasetError(f"{str(path)!r} holds {'synthetic roots' if roots else 'no roots'}; give a dataset "
                           "traced from a model pair")
    if roots and "pair" not in dataset.metadata:
        raise DatasetError(f"the dataset {str(path)!r} records no pair in its metadata; give a dataset that "
                           "'verispec selector dataset' built")
    return dataset, roots


#: What a script that labels a dataset's roots again reads from its metadata (``labelling_settings``): the build's
#: grid, latency model (the features' prices), pair, sampled combs, seed and certify width.
LABELLING_SETTINGS = ("grid", "latency", "pair", "samples", "seed", "epsilon")


def labelling_settings(dataset, path) -> dict:
    """The metadata of ``dataset`` (read from ``path``) when it records every one of ``LABELLING_SETTINGS``, as
    ``verispec selector dataset`` writes them; else a one-line DatasetError naming the dataset and what it lacks (a
    dataset assembled by hand or by a test helper records no latency model, and was a KeyError)."""
    missing = [name for name in LABELLING_SETTINGS if name not in dataset.metadata]
    if missing:
        raise DatasetError(f"the dataset {str(path)!r} records no {', '.join(missing)} in its metadata, which "
                           "labelling its roots again needs; give a dataset that 'verispec selector dataset' built")
    if not isinstance(dataset.metadata["grid"], Mapping) or any(
            name not in dataset.metadata["grid"] for name in ("ks", "l1s", "l2s")):
        raise DatasetError(f"the dataset {str(path)!r} records its grid as {describe(dataset.metadata['grid'])}, "
                           "not its ks, l1s and l2s; give a dataset that 'verispec selector dataset' built")
    return dataset.metadata


def load_roots_pair(roots: list, pair: str | None, target: str | None, draft: str | None, default: str,
                    **options):
    """The pair ``roots`` were traced from: ``target`` and ``draft`` directories together, or the installed ``pair``
    (None: ``default``, the dataset's); its name must be the roots' (a one-line error otherwise). ``options`` go to
    ``verispec.models.load_pair`` (device, dtype)."""
    from verispec.models import load_pair

    if (target is None) != (draft is None):
        raise VerispecError("give --target and --draft together (or --pair, or neither: the dataset's pair)")
    loaded = load_pair(target, draft, **options) if target else load_pair(pair or default, **options)
    if loaded.name != roots[0].pair:
        raise VerispecError(f"the dataset's roots come from the pair {roots[0].pair!r}, not {loaded.name!r}; give "
                            "its --pair (or the --target and --draft it was built with)")
    return loaded


def sample_roots(roots: list, count: int, seed: int) -> list:
    """``count`` of ``roots`` drawn without replacement from a generator seeded with ``seed``, in the dataset's
    order (a prompt's roots next to each other: they share their context's KV caches)."""
    chosen = np.random.default_rng(seed).choice(len(roots), size=min(count, len(roots)), replace=False)
    return [roots[i] for i in sorted(chosen.tolist())]


__all__ = ["LABELLING_SETTINGS", "Root", "dataset_pair_roots", "labelling_settings", "load_roots_pair",
           "parse_setting", "sample_roots", "sampling_text",
           "synthetic_roots", "trace_roots"]
