"""Each rule's own verification time per block, for every action of the datasets' grid, at the pair's vocabulary and
the datasets' sampling settings, on this machine (issue 66, item 4): the verification-cost file the selector verdict
prices a latency regime with (``verispec.selector.verification_cost``).

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/verification_cost.py --dataset data/selector/qwen-t07-m64.npz \\
        --dataset data/selector/qwen-t07-m64-psbv.npz --dataset data/selector/qwen-t1-r2.npz \\
        --dataset data/selector/qwen-t1-r2-globalres.npz --regime cpu --out data/latency/verify-cost-cpu.json

What is timed is real decoding's verification step itself, ``SpeculativeDecoder._verify`` of
``verispec.models.decoding`` (``verify_s`` of every ``BlockRecord``): from the drafted tree's q and the target's p at
every node to the drawn (node, token), the rule's batched law ``emission_laws`` on a one-row ``TreeBatch`` of float64
tensors [1, n, V], the engine's check of it, and the two draws. The models' forwards are not timed: the latency model
prices them. The laws are synthetic, at the datasets' V (151,936 for Qwen) and each setting's sampling law: at every
node a Zipf-like target, logits -1.1 log(rank) over a random ranking, and a draft of logits 0.8 x the target's plus
N(0, 0.5^2) (``benchmarks/bench_globalres.py``'s "zipf" family), both float32 logits as the models return them, put
through the setting's ``Sampling`` (temperature, top-k, top-p) in float64 as decoding does: at T = 0.7 top-k 20
the support is at most 20 tokens, at T = 1 every token. The tree of each block is drawn from those q by the
action's drafter with a seeded generator, as decoding draws it (paths that draw the same tokens merge, so trees at
T = 0.7 are smaller than the action's largest). Every rule that verifies the tree is timed on the same blocks.

Per (setting, rule, tree): ``--repeats`` blocks (seeds 0..R-1), each verified ``--calls`` times (the least kept) after
one untimed call of the rule at the setting; the cell's price is the median over blocks of that CPU time
(``time.process_time``, one torch thread: what the step costs on a core of its own, which a loaded box inflates less
than wall time), its wall-clock median beside it, the load average before and after. A cell whose blocks pass
``--cell-budget`` seconds (hard: a call is stopped inside) keeps the median of the blocks it finished; one stopped in
its first block records the budget as its lower bound and why it stopped, and the verdict leaves that rule unpriced at
that setting. Rows go to a resumable store (``OUT.rows.json``, keyed on setting, rule and tree); ``--time-budget``
stops the run (exit 3: the same command continues); ``--remeasure RULES`` measures those rules' rows again (after
their code changed), ``--retry-stopped`` the cells a budget stopped (a stall of a shared box). Run it with the
checkout first on PYTHONPATH (``PYTHONPATH=.``): a script's own folder comes first on the path, so an installed
verispec would be the one timed otherwise. Every action of a grid with the same tree and rule shares its row (K with
L2 = 0 is the trunk chain). The file ``OUT`` (JSON, ``verispec.selector.verification_cost.FORMAT``, with the run's
record) holds per setting every action's ms, the rows, and per rule the smallest, median and largest ms over its
actions.
"""

from __future__ import annotations

import os
import shlex
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch loads: the lead's benchmarks hold the other core

import numpy as np

from verispec.simulator.problems import Problem

#: The Zipf-like law of every node (``benchmarks/bench_globalres.py``'s "zipf"): target logits -ZIPF log(rank),
#: draft logits DRAFT_SCALE x the target's + N(0, DRAFT_NOISE^2).
ZIPF, DRAFT_SCALE, DRAFT_NOISE = 1.1, 0.8, 0.5


def rows_path(out: Path) -> Path:
    return out.with_name(out.name + ".rows.json")


class SyntheticSide(Problem):
    """The draft side of one synthetic block (what ``DraftSide`` is to a model): q at every prefix the drafter asks
    for, and p beside it, drawn once per prefix from a generator seeded by (seed, prefix)."""

    exact = False

    def __init__(self, vocab: int, sampling, horizon: int, seed: tuple[int, ...], device: str = "cpu"):
        self.vocab_size, self.sampling, self.horizon, self.seed = vocab, sampling, horizon, seed
        self.device = device
        self.law: dict = {}   # prefix -> q, torch float64 [V] (what _verify reads)
        self.host: dict = {}  # prefix -> q, numpy [V] (what the drafter reads)
        self.p: dict = {}     # prefix -> p, torch float64 [V]

    def _make(self, prefix: tuple[int, ...]) -> None:
        import torch

        rng = np.random.default_rng([*self.seed, len(prefix), *prefix])
        target = -ZIPF * np.log(rng.permutation(self.vocab_size) + 1.0)
        draft = DRAFT_SCALE * target + DRAFT_NOISE * rng.standard_normal(self.vocab_size)
        laws = self.sampling.probabilities(torch.from_numpy(np.stack([target, draft]).astype(np.float32)))  # [2, V]
        on_device = laws.to(self.device)  # where decoding holds them: the models' device
        self.p[prefix], self.law[prefix], self.host[prefix] = on_device[0], on_device[1], laws[1].numpy()

    def draft(self, prefix) -> np.ndarray:
        prefix = tuple(prefix)
        if prefix not in self.law:
            self._make(prefix)
        return self.host[prefix]

    def target(self, prefix) -> np.ndarray:
        return self.target_law(prefix).cpu().numpy()

    def target_law(self, prefix):
        prefix = tuple(prefix)
        if prefix not in self.p:
            self._make(prefix)
        return self.p[prefix]


def make_block(action, vocab: int, sampling, seed: tuple[int, ...], device: str = "cpu"):
    """A ``_Block`` as decoding holds it after the target's forward: the tree drawn by the action's drafter from
    synthetic q, and p [n, V] at its nodes, on ``device``."""
    import torch

    from verispec.models.block_tree import TreeLayout
    from verispec.models.decoding import _Block
    from verispec.simulator.chooser import RandomChooser
    from verispec.simulator.trees import TreeBuilder

    side = SyntheticSide(vocab, sampling, action.drafter.depth + 1, seed, device)
    if not action.drafts:  # the root alone, as decoding lays out chain:0: no draft side
        return _Block(action, side=None, layout=TreeLayout.of_shape(TreeBuilder().shape()), p=side.target_law(())[None])
    shape = action.drafter.draw(side, RandomChooser(np.random.default_rng([*seed, 1])))
    layout = TreeLayout.of_shape(shape)
    p = torch.stack([side.target_law(path) for path in layout.paths])  # [n, V]
    return _Block(action, side=side, layout=layout, p=p)


class _Host:
    """What ``SpeculativeDecoder._verify`` reads of its decoder: the device, the run's generator, and its own
    helpers for a rule's call (the decoder's methods themselves)."""

    from verispec.models.decoding import SpeculativeDecoder as _Decoder

    _rule_call = _Decoder._rule_call
    _sample_procedure = _Decoder._sample_procedure
    verify = _Decoder._verify

    def __init__(self, seed: int, device: str = "cpu"):
        from types import SimpleNamespace

        import torch

        self.pair = SimpleNamespace(device=torch.device(device))
        self.rng = np.random.default_rng(seed)


def _synchronise(host) -> None:
    """On a GPU, wait for the kernels queued so far, so that a wall-clock reading covers their work."""
    if host.pair.device.type == "cuda":
        import torch

        torch.cuda.synchronize(host.pair.device)


def time_cell(host, action, blocks, deadline: float | None, calls: int = 1):
    """(cpu ms [k], wall ms [k], why stopped or None) of ``action`` verifying each of ``blocks``, each block's the
    least of ``calls`` calls on it (a call the box interrupted, a page-fault storm, costs a few ms more: 3.6 ms spikes
    on a 0.7 ms step were measured under load), stopped (hard) at ``deadline``."""
    from verispec.errors import AnalysisTimeoutError
    from verispec.guard import budget

    cpu, wall = [], []
    for block in blocks:
        block.action = action
        try:
            with budget.time_budget(deadline, hard=True, what="the cell's --cell-budget"):
                spent = []
                for _ in range(calls):
                    _synchronise(host)
                    began, began_cpu = time.perf_counter(), time.process_time()
                    host.verify(block)
                    _synchronise(host)
                    spent.append((1e3 * (time.process_time() - began_cpu), 1e3 * (time.perf_counter() - began)))
            cpu.append(min(ms for ms, _ in spent))
            wall.append(min(ms for _, ms in spent))
        except AnalysisTimeoutError:
            return cpu, wall, f"--cell-budget reached after {len(cpu)} of {len(blocks)} blocks"
    return cpu, wall, None


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("verification_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", required=True,
                        help="a dataset whose grid and setting are measured (repeatable)")
    parser.add_argument("--regime", default="cpu", help="the latency regime the file prices (default cpu)")
    parser.add_argument("--rules", default=None, help="only these rules, comma separated (default every rule)")
    parser.add_argument("--remeasure", default="", help="rules whose stored rows are measured again")
    parser.add_argument("--retry-stopped", action="store_true",
                        help="measure again the stored cells their budget stopped (a stall of the box, say)")
    parser.add_argument("--repeats", type=int, default=5, help="blocks per (setting, rule, tree) (default 5)")
    parser.add_argument("--calls", type=int, default=2, help="calls timed per block, the least kept (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu",
                        help="where the laws live and the rules run (default cpu; cuda: priced by wall ms after the "
                             "device's queue is done, not CPU ms)")
    parser.add_argument("--cell-budget", type=float, default=60.0, help="seconds per cell (default 60)")
    parser.add_argument("--time-budget", type=float, default=None, help="seconds for the run (exit 3 at it)")
    parser.add_argument("--out", type=Path, required=True, help="the verification-cost file (rows in OUT.rows.json)")
    args = parser.parse_args(argv)
    from verispec.study.script_files import run_script

    return run_script("verification_cost", lambda held: _run(args, argv, held))


def _run(args, argv, held) -> int:
    import torch

    from verispec.errors import VerispecError
    from verispec.files.io import ResultStore, atomic_write_json
    from verispec.files.provenance import MARKER_KEY, run_record, written_by
    from verispec.guard.limits import MAX_THREADS
    from verispec.models.decoding import _resolve_action
    from verispec.models.sampling import Sampling
    from verispec.selector.dataset import Dataset
    from verispec.selector.roots import sampling_text
    from verispec.selector.verification_cost import FORMAT, KIND
    from verispec.study.script_files import MAX_SCRIPT_BUDGET, Above, RunOutputs, check_input, check_ranges
    from verispec.verifiers import split_names

    start = time.monotonic()
    check_ranges([("--repeats", args.repeats, 1, 1000), ("--calls", args.calls, 1, 100),
                  ("--threads", args.threads, 1, MAX_THREADS),
                  ("--cell-budget", args.cell_budget, Above(0), MAX_SCRIPT_BUDGET),
                  ("--time-budget", args.time_budget, Above(0), MAX_SCRIPT_BUDGET)])
    for path in args.dataset:
        check_input(path, "the dataset")
    RunOutputs("--out", store=rows_path(args.out), result=args.out).claim(held)
    torch.set_num_threads(args.threads)
    record = run_record(shlex.join(["python", "experiments/verification_cost.py",
                                    *(sys.argv[1:] if argv is None else argv)]), args.dataset, threads=args.threads)
    chosen = None if args.rules is None else set(split_names(args.rules))
    remeasure = set(split_names(args.remeasure)) if args.remeasure else set()
    settings: dict[str, dict] = {}  # setting name -> {"sampling", "vocab", "actions": [Action]}
    for path in args.dataset:
        data = Dataset.load(path)
        vocab = int(data.metadata["vocab_size"])
        for index, sampling in enumerate(data.samplings):
            if not (data.setting == index).any():
                continue
            entry = settings.setdefault(sampling_text(sampling), {"sampling": sampling, "vocab": vocab, "actions": []})
            entry["actions"] += [action for action in data.grid.actions
                                 if chosen is None or action.verifier in chosen]
    vocabularies = {entry["vocab"] for entry in settings.values()}
    if len(vocabularies) != 1:
        raise VerispecError(f"the datasets are of several vocabularies ({sorted(vocabularies)}); give one pair's")
    vocab = vocabularies.pop()
    store = ResultStore(rows_path(args.out), parameters={
        "vocab_size": vocab, "repeats": args.repeats, "calls": args.calls, "threads": args.threads,
        "cell_budget": args.cell_budget, "device": args.device,
        "laws": {"zipf": ZIPF, "draft_scale": DRAFT_SCALE, "draft_noise": DRAFT_NOISE}, "regime": args.regime})
    print(f"verification_cost: {', '.join(settings)} at V = {vocab:,}, {args.threads} thread(s), load average "
          f"{os.getloadavg()[0]:.2f}", file=sys.stderr)
    resolved: dict = {}
    for number, (name, entry) in enumerate(settings.items()):
        sampling = Sampling(**{key: entry["sampling"].get(key) for key in ("temperature", "top_k", "top_p")})
        by_tree: dict[str, list[str]] = {}
        for action in entry["actions"]:
            rules = by_tree.setdefault(action.tree, [])
            if action.verifier not in rules:
                rules.append(action.verifier)
        warmed: set = set()
        for tree, rules in by_tree.items():
            keys = {rule: f"{name} | {rule} | {tree}" for rule in rules}
            todo = [rule for rule in rules if rule in remeasure or not store.done(keys[rule]) or
                    (args.retry_stopped and store.rows[keys[rule]]["stopped"] is not None)]
            if not todo:
                continue
            if args.time_budget is not None and time.monotonic() - start > args.time_budget:
                print(f"verification_cost: --time-budget {args.time_budget:g} s reached; run the same command again "
                      "to continue", file=sys.stderr)
                return 3
            for rule in todo:
                key = (tree, rule)
                if key not in resolved:
                    resolved[key] = _resolve_action(tree, rule, vocab)
            blocks = [make_block(resolved[(tree, todo[0])], vocab, sampling, (number, repeat), args.device)
                      for repeat in range(args.repeats)]
            host = _Host(0, args.device)
            rows = {}
            for rule in todo:
                action = resolved[(tree, rule)]
                if rule not in warmed:  # imports and caches a rule builds at its first call
                    time_cell(host, action, blocks[:1], None)
                    warmed.add(rule)
                load = os.getloadavg()[0]
                cell_deadline = time.monotonic() + args.cell_budget
                cpu, wall, stopped = time_cell(host, action, blocks, cell_deadline, args.calls)
                rows[f"{name} | {rule} | {tree}"] = {
                    "setting": name, "rule": rule, "tree": tree, "cpu_ms": cpu, "wall_ms": wall,
                    "nodes": [len(block.layout.parent) for block in blocks[:len(cpu)]], "stopped": stopped,
                    "lower_bound_ms": None if cpu else 1e3 * args.cell_budget,
                    "load": [round(load, 2), round(os.getloadavg()[0], 2)], "commit": record["commit"],
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # a resumed file's rows: their day
            store.add_many(rows)
    result = _result(settings, store, record, args, vocab, start)
    result[MARKER_KEY] = written_by(KIND, "experiments/verification_cost.py")
    result["format"] = FORMAT
    atomic_write_json(args.out, result)
    print(args.out)
    return 0


def _result(settings, store, record, args, vocab, start) -> dict:
    """The file: per setting every action's median CPU ms (or its stopped cell), the rows, per rule a summary."""
    out_settings, summary = {}, {}
    price = "cpu_ms" if args.device == "cpu" else "wall_ms"  # a GPU's work is not this process's CPU time
    for name, entry in settings.items():
        actions, stopped = {}, {}
        for action in entry["actions"]:
            row = store.rows[f"{name} | {action.verifier} | {action.tree}"]
            if row[price]:
                actions[action.name] = round(statistics.median(row[price]), 4)
            else:
                stopped[action.name] = {"lower_bound_ms": row["lower_bound_ms"], "why": row["stopped"]}
        out_settings[name] = {"sampling": entry["sampling"], "actions": actions, "stopped": stopped}
        for rule in dict.fromkeys(action.verifier for action in entry["actions"]):
            values = [ms for action_name, ms in actions.items() if action_name.split(" ")[0] == rule]
            summary.setdefault(name, {})[rule] = {
                "min_ms": min(values), "median_ms": statistics.median(values), "max_ms": max(values),
                "actions": len(values)} if values else None
    rows = [{**row, **{name: [round(ms, 3) for ms in row[name]] for name in ("cpu_ms", "wall_ms")}}
            for row in store.rows.values() if row["setting"] in settings]  # microseconds: the timer's grain
    return {"regime": args.regime, "device": _device_words(args, record), "vocab_size": vocab, "unit": "ms",
            "statistic": f"median over {args.repeats} blocks per (setting, rule, tree) of the least "
                         f"{'CPU (process)' if price == 'cpu_ms' else 'wall-clock (the device synchronised)'} ms of "
                         f"{args.calls} calls on the block",
            "settings": out_settings, "summary": summary, "rows": rows,
            "record": {**record, "seconds": round(time.monotonic() - start, 1)}}


def _device_words(args, record) -> str:
    if args.device == "cpu":
        return f"{record['machine']['cpu']} ({args.threads} torch thread(s))"
    import torch

    return f"{torch.cuda.get_device_name(torch.device(args.device))} ({args.device})"


if __name__ == "__main__":
    raise SystemExit(main())
