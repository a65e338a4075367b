#!/usr/bin/env bash
# Issue 78 item 4: price a GPU latency regime in one run on one device, the forwards and each leading rule's
# verification together, for the next session lent a GPU (the verdict's GPU regimes say "verification unpriced" until
# then). Nothing is downloaded: the forwards are timed on the Qwen2.5-Coder pair's shapes with random weights
# (benchmarks/bench_forward.py --configs, a forward's time depends on the shapes only), and the verification on the
# synthetic Zipf-like laws of experiments/verification_cost.py at V = 151,936, at every action of the four datasets'
# grid that the leading rules verify (psbv, globalres, specinfer, traversal, traversal-iid).
#
#   device run (about 6 minutes on an H200; array-api-compat, which the device's image lacks, travels as a wheel):
#     here:  echo /.whl/ >> .git/info/exclude; python3 -m pip download --no-deps --only-binary=:all: \
#              --python-version 3.12 --implementation cp -d .whl 'array-api-compat==1.13.0'
#     run:   carry [".whl"], command "bash experiments/gpu_pricing.sh", timeout_s 540
#   dry run on this CPU (the same steps, tiny): DEVICE=cpu QUICK=1 bash experiments/gpu_pricing.sh
#
# Writes under $OUT (the device tool's folder; /tmp/gpu-pricing elsewhere): forward.json (t_p by width and t_q,
# bench_forward's table), verify-cost-<regime>.json (experiments/verification_cost.py's file, priced by wall ms after
# the device synchronises) and log.txt. The verdict then prices the regime with both:
#   verispec selector verdict ... --latency <a latency model from forward.json> --verification-cost verify-cost-h200.json
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-pricing}
DEVICE=${DEVICE:-cuda}
REGIME=${REGIME:-h200}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
DATASETS=(--dataset data/selector/qwen-t07-m64.npz --dataset data/selector/qwen-t07-m64-psbv.npz
          --dataset data/selector/qwen-t1-r2.npz --dataset data/selector/qwen-t1-r2-globalres.npz)
RULES=psbv,globalres,specinfer,traversal,traversal-iid
{
    echo "gpu_pricing: device $DEVICE, regime $REGIME, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    if [ -n "${QUICK:-}" ]; then
        # the dry run: a tiny random pair, two widths; one rule at one block a cell, for a minute
        "$PY" benchmarks/bench_forward.py --tiny --device "$DEVICE" --quick --modes dynamic --json "$OUT/forward.json"
        "$PY" experiments/verification_cost.py "${DATASETS[@]}" --regime "$REGIME" --device "$DEVICE" --rules psbv \
            --repeats 1 --calls 1 --time-budget 60 --out "$OUT/verify-cost-$REGIME.json" || [ $? -eq 3 ]
    else
        # the labelled sizes: a target forward scores 1 to 64 tree nodes, a draft step 1 to 4 paths
        "$PY" benchmarks/bench_forward.py --configs benchmarks/configs/qwen2.5-coder-1.5b.json,benchmarks/configs/qwen2.5-coder-0.5b.json \
            --device "$DEVICE" --dtype bfloat16 --widths 1,2,4,8,16,32,64 --modes dynamic,static --repeats 10 \
            --json "$OUT/forward.json"
        "$PY" experiments/verification_cost.py "${DATASETS[@]}" --regime "$REGIME" --device "$DEVICE" --rules "$RULES" \
            --repeats 5 --calls 2 --cell-budget 20 --time-budget 300 --out "$OUT/verify-cost-$REGIME.json" || [ $? -eq 3 ]
    fi
    echo "gpu_pricing: done $(date -u +%FT%TZ)"
} 2>&1 | tee "$OUT/log.txt"
