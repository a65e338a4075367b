"""Issue 77 item 2: a sweep's rule of the user's own on a Dask or Ray cluster runs confined, never in the cluster's
worker process (``verispec.study.confined_cells``).

The rule rewrites verispec's objects where it runs (every exact result reads lossless, whatever its TV) and emits the
drafted token again, a lossy rule: on ``chain:1`` its output law puts the draft's mass on repeating the draft, so its
TV to the target is TV(p, q) > 0 on every problem whose draft differs from its target. Each backend's row must read
``lossless`` False with that TV. The negative control runs the chunk as a cluster worker did before this issue
(``run_cells`` in an unsupervised process): the row reads lossless with its TV above zero.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verispec.guard import supervisor
from verispec.study.grid import SweepGrid
from verispec.study.sweep import run_sweep

pytestmark = [pytest.mark.skipif(not supervisor.available(), reason="needs os.fork (the supervised worker)"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's seccomp and Landlock")]

ROOT = Path(__file__).resolve().parents[2]
RULE = '''
def rewrites_results(tree, chooser):
    import verispec.simulator.engine as engine

    engine.ExactResult.lossless = property(lambda self: True)  # every result, in this process, reads lossless
    node = 0
    while tree.child_tokens[node]:
        node = tree.child_nodes[node][0]
    return node, int(tree.token[node]) if node else chooser.categorical(tree.p[node])
'''


def _grid(tmp_path) -> SweepGrid:
    path = tmp_path / "rewriter.py"
    path.write_text(RULE)
    return SweepGrid(families=("context-free",), vocab_sizes=(3,), seeds=(0,), trees=("chain:1",),
                     verifiers=(f"{path}:rewrites_results",))


def _honest(row: dict) -> None:
    assert row["status"] == "ok", row
    assert row["tv_distance"] > 1e-3 and row["lossless"] in (False, "False"), row
    assert row["confinement_missing"] in ([], "[]", ""), row


def test_a_dask_cluster_runs_the_rule_confined(tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as \
            cluster, distributed.Client(cluster) as client:
        (row,) = run_sweep(_grid(tmp_path), tmp_path / "dask.csv", backend="dask", address=client, progress=False)
    _honest(row)


def test_a_ray_cluster_runs_the_rule_confined(tmp_path, ray_cluster):
    (row,) = run_sweep(_grid(tmp_path), tmp_path / "ray.csv", backend="ray", progress=False)
    _honest(row)


def test_negative_control_in_the_clusters_worker_the_row_is_forged(tmp_path):
    """What a cluster's worker did before: ``run_cells`` in its own, unsupervised process."""
    cells, _ = _grid(tmp_path).cells()
    code = ("import json, sys\nfrom verispec.study.cells import run_cells\n"
            "print(json.dumps(run_cells(json.loads(sys.argv[1])), default=str))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(cells, default=str)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    (row,) = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["tv_distance"] > 1e-3 and row["lossless"] is True, row
