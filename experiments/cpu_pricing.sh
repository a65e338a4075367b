#!/usr/bin/env bash
# Issue 78 item 3: price this CPU's latency regime in one run on one box, the forwards and each rule's verification
# back to back, so that the verdict's priced cpu regime does not put forwards timed on one day beside verification
# timed on another (the box's speed moved x1.4-2.2 between those days).
#
#   verispec models install qwen-coder           # once (4 minutes, 12 GB peak); nothing is downloaded here
#   bash experiments/cpu_pricing.sh              # on a quiet box: about 15 minutes on this 2-core CPU
#
# Steps, each file under $OUT (default /tmp/cpu-pricing), log.txt beside them:
#   1. forwards-cpu.json: t_p(n) at every size decoding's trees have (at most 21 nodes on the four datasets' grid;
#      up to 32 measured) and t_q(w) at widths 1-4, the pair itself with the small-batch linears decoding runs,
#      2 torch threads as decoding runs, median of 9; the model carries its run ('measured': date, machine, seconds).
#   2. verify-cost-cpu.json: experiments/verification_cost.py at every action of the four datasets' grid, one torch
#      thread (a core of its own), every rule; its rows carry the minute each was timed.
#   3. forwards-after.json: the forwards again at four sizes, the control of the box's drift over the run; the
#      script prints after/before per size (a box whose speed moved during the run shows it here).
#   4. latency-cpu-t07-t1.json: forwards-cpu.json with the tree sizes of the committed model (their sizes do not
#      depend on what a forward costs: experiments/tree_sizes.py --sizes-from).
# The verdict then prices the cpu regime with 4 and 2, and its table says "forwards and verification timed in one
# run" from the two files' records (verispec.selector.verification_cost.pricing_run):
#   verispec selector verdict --dataset ... --latency $OUT/latency-cpu-t07-t1.json --verification-cost \
#       $OUT/verify-cost-cpu.json ...
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cpu-pricing}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
DATASETS=(--dataset data/selector/qwen-t07-m64.npz --dataset data/selector/qwen-t07-m64-psbv.npz
          --dataset data/selector/qwen-t1-r2.npz --dataset data/selector/qwen-t1-r2-globalres.npz)
SIZES=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,24,32
SIZES_FROM=data/latency/latency-cpu-small-batch-t07-t1.json
{
    echo "cpu_pricing: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load $(cut -d' ' -f1-3 /proc/loadavg)"
    VERISPEC_SMALL_BATCH_LINEAR=1 "$PY" -m verispec latency --pair qwen-coder --threads 2 --repeats 9 \
        --draft-sizes 1,2,3,4 --sizes "$SIZES" --out "$OUT/forwards-cpu.json"
    echo "cpu_pricing: forwards timed $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$PY" experiments/verification_cost.py "${DATASETS[@]}" --regime cpu --threads 1 --out "$OUT/verify-cost-cpu.json"
    echo "cpu_pricing: verification timed $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
    VERISPEC_SMALL_BATCH_LINEAR=1 "$PY" -m verispec latency --pair qwen-coder --threads 2 --repeats 9 \
        --draft-sizes 1,4 --sizes 1,8,16,21 --out "$OUT/forwards-after.json"
    "$PY" - "$OUT/forwards-cpu.json" "$OUT/forwards-after.json" <<'EOF'
import json, sys
before, after = (json.load(open(path)) for path in sys.argv[1:])
ratio = lambda sizes, times, n: dict(zip(after[sizes], after[times]))[n] / dict(zip(before[sizes], before[times]))[n]
parts = [f"t_p({n}) x{ratio('target_sizes', 'target_times', n):.3f}" for n in after["target_sizes"]]
parts += [f"t_q({w}) x{ratio('draft_sizes', 'draft_times', w):.3f}" for w in after["draft_sizes"]]
print("cpu_pricing: the box's drift over the run, after/before: " + ", ".join(parts))
EOF
    "$PY" experiments/tree_sizes.py --latency "$OUT/forwards-cpu.json" --sizes-from "$SIZES_FROM" \
        --out "$OUT/latency-cpu-t07-t1.json"
    echo "cpu_pricing: done $(date -u +%FT%TZ)"
} 2>&1 | tee "$OUT/log.txt"
