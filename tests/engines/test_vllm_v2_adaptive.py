"""vLLM's adaptive verification (``enable_adaptive_verification``, release 0.28 on), its own admission function and
kernels, with a planted confidence that reads the slot's own draft.

The runner verifies only the draft slots its budget admits: the globally best by survival, the running product of
per-slot confidences (``_assign_draft_token_budget``). DSpark's confidence head reads the token *before* a slot, so
whether slot i is verified depends on the drafts before it, never on draft i itself, and a later slot never outranks
an earlier one of its request: the law holds (``v2-adaptive``, chain:2, reads LOSSLESS; the check is too long for
the suite, docs/guides/check_engine.md gives its time). A confidence that reads the slot's own draft breaks that:
here, one draft each, a budget of one slot, the neighbour's survival 0.7 and the checked request's 0.9 for token 0
and 0.3 for token 1, the checked draft is verified exactly when it is token 0, and the bonus token is drawn from p
otherwise. The first token's law is then q_0 min(1, p_0 / q_0) at 0, the residual's share where the draft was
token 0 and rejected, plus (1 - q_0) p; with p_0 >= q_0 it is q_0 delta_0 + (1 - q_0) p, so the TV is
q_0 (1 - p_0), derived by hand here. The second token is p's whatever came first, so the block's TV is the first
token's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.engines import vllm_release
from verispec.engines import version_key
from verispec.engines import vllm as vllm_adapter

ROOT = Path(__file__).resolve().parents[2]
RELEASE = vllm_release()
needs_adaptive = pytest.mark.skipif(
    RELEASE not in vllm_adapter.SUPPORTED or version_key(RELEASE) < version_key("0.28.0"),
    reason=f"needs an installed vLLM from 0.28 on, which has adaptive verification (here: {RELEASE})")

P, Q = (0.6, 0.4), (0.3, 0.7)

#: The child: the admission reads each slot's own draft (the planted confidence), then the step is checked exactly.
CHILD = f"""
import json
from verispec.engines import vllm_v2
kernels = vllm_v2._adaptive_kernels
vllm_v2._adaptive_kernels = lambda *args, own_token: kernels(*args, own_token=True)
from verispec.external.check import check_external
from verispec.simulator import ContextFreeProblem
report = check_external(vllm_v2.v2_adaptive, "step", "chain:1", problem=ContextFreeProblem({list(P)}, {list(Q)}),
                        mode="exact", rng="capture", sampling="temperature=1", time_budget=900, threshold=1e-6)
print(json.dumps({{"verdict": report.verdict.value, "tv": report.tv_distance, "mode": report.mode}}))
"""


def test_the_stand_in_confidences_make_the_draft_length_depend_on_the_draft():
    """The setting the module docstring derives from: token 0's confidence above the neighbour's, token 1's below,
    and in the chain:2 check the second slot dropped exactly when the first draft is token 1."""
    from verispec.engines import vllm_v2

    table, neighbour = vllm_v2.ADAPTIVE_CONFIDENCE, vllm_v2.NEIGHBOUR_CONFIDENCE
    assert table[0] > neighbour > table[1]
    second = {token: table[0] * table[token] for token in range(len(table))}  # prompt of zeros: slot 1 reads 0
    assert [token for token, value in second.items() if value < neighbour * neighbour] == [1]


@needs_adaptive
def test_a_confidence_that_reads_its_own_draft_is_lossy_at_the_closed_form():
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-800:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mode"] == "exact" and result["verdict"] == "lossy", result
    assert P[0] >= Q[0]
    assert abs(result["tv"] - Q[0] * (1 - P[0])) < 1e-6, result
