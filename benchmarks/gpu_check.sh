#!/usr/bin/env bash
# The GPU checks of issues 20 and 28 in one run, for a machine with one CUDA GPU (torch with CUDA, lightning,
# pytest, pytest-xdist): the cuda tests (tests/test_cuda_graph.py's captured step among them), the captured
# step's benchmark rows (hand-written whole-step graph, Trainer(cuda_graph=True)), the synchronization sites,
# the eager step benchmark, then the default suite. Writes everything under $OUT (default ./gpu-out);
# budgeted to finish in under 11 minutes (BUDGET=seconds to change it; the suite gets what is left).
#
#   bash benchmarks/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY="${PYTHON:-python} -u" # unbuffered: a part cut short by its limit keeps what it printed
START=$(date +%s)
BUDGET=${BUDGET:-660} # seconds for all parts; the suite gets what the others left

left() { echo $((BUDGET - ($(date +%s) - START))); }
part() { # name, timeout (s), command...: output to $OUT/name.txt, status to $OUT/summary.txt
    local name=$1 limit=$2
    shift 2
    if [ "$limit" -lt 20 ]; then
        echo "$name: SKIPPED (budget spent)" | tee -a "$OUT/summary.txt"
        return
    fi
    local t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.txt" 2>&1
    local rc=$?
    echo "$name: rc=$rc in $(($(date +%s) - t0)) s (limit $limit s): $(tail -n 1 "$OUT/$name.txt")" | tee -a "$OUT/summary.txt"
}

: >"$OUT/summary.txt"
pip install -q --no-index --find-links .whl jsonargparse docstring-parser typeshed-client 2>/dev/null || true
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    $PY -c "import torch, lightning; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'lightning', lightning.__version__, 'device', torch.cuda.get_device_name())" 2>&1
    nproc
} >"$OUT/machine.txt"
cat "$OUT/machine.txt"

# 1. the cuda-marked tests (AMP bitwise, resume, no sync, CPU after fit, NaN, strategies, OOM, the captured step)
part cuda-tests 240 $PY -m pytest -q -p no:cacheprovider -m "cuda and not slow" -k "not wandb" tests -rs
# 2. the captured step: raw eager vs the hand-written whole-step graph vs ours eager vs ours with cuda_graph=True
#    (steady ratios to raw and to the hand-written graph, extra GPU memory, the captured fit's own summary line)
part gpu-graph-benchmark 180 $PY benchmarks/gpu_step.py --rounds 3 --only tiny medium unet-bf16 --systems graph ours ours-graph
# 3. where each system waits on the device (the medium MLP in bf16 bare/typical and in fp16)
part syncs 60 $PY benchmarks/gpu_step.py --syncs
# 4. steady per-step ratios to a raw loop, raw vs ours vs Lightning, 3 rotated rounds
part gpu-step-benchmark 240 $PY benchmarks/gpu_step.py --rounds 3 --systems ours lightning
# 5. the default suite as a user runs it, with what is left of the budget
part default-suite "$(left)" $PY -m pytest -q -p no:cacheprovider -n 8 -k "not wandb"

echo "total $(($(date +%s) - START)) s" | tee -a "$OUT/summary.txt"
