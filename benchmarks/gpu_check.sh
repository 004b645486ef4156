#!/usr/bin/env bash
# The captured step's GPU check in one call of at most 540 s, for a machine with one CUDA GPU, torch (CUDA),
# lightning and pytest, and nothing else. Parts, in order, each with its own limit:
#   1. captured-step   the captured step's GPU tests (tests/test_cuda_graph*.py)
#   2. graph-bench     benchmarks/gpu_step.py: raw / hand-written graph / ours / ours-graph, tiny medium unet-bf16
#   3. eager-cuda      the other cuda-marked tests (the eager GPU step)
# It brings its own dependencies: the wheels benchmarks/gpu_wheels.sh fetched on a machine with the registry, in
# $WHEELS (default ./.whl, git-ignored: carry it to the GPU machine), installed into $OUT/deps; it stops at once,
# saying so, when they are missing. One line per part and a final summary; everything under $OUT (default
# ./gpu-out): machine.txt, <part>.txt, <part>.xml (pytest), summary.txt.
#
#   bash benchmarks/gpu_check.sh            # on the GPU machine
#   bash benchmarks/gpu_check.sh --dry-run  # anywhere: the parts, their limits and commands; checks collection
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
WHEELS=${WHEELS:-$PWD/.whl}
PY=${PYTHON:-python}
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
mkdir -p "$OUT"
export PYTHONPATH=$PWD:$OUT/deps${PYTHONPATH:+:$PYTHONPATH}
START=$(date +%s)

PARTS=(captured-step graph-bench eager-cuda)
declare -A LIMIT=([setup]=30 [captured-step]=150 [graph-bench]=210 [eager-cuda]=150)
declare -A RUN=(
    [captured-step]="$PY -u -m pytest -q -p no:cacheprovider -m cuda -rs tests/test_cuda_graph.py tests/test_cuda_graph_safety.py --junitxml=$OUT/captured-step.xml"
    [graph-bench]="$PY -u benchmarks/gpu_step.py --rounds 3 --bare --only tiny medium unet-bf16 --systems graph ours ours-graph"
    [eager-cuda]="$PY -u -m pytest -q -p no:cacheprovider -m 'cuda and not slow' -rs tests --ignore tests/test_cuda_graph.py --ignore tests/test_cuda_graph_safety.py -k 'not wandb' --junitxml=$OUT/eager-cuda.xml"
)
TOTAL=${LIMIT[setup]}
for name in "${PARTS[@]}"; do TOTAL=$((TOTAL + LIMIT[$name])); done

line() { echo "$1" | tee -a "$OUT/summary.txt"; }

if [ "$DRY" = 1 ]; then
    : >"$OUT/summary.txt"
    line "dry run: $((${#PARTS[@]})) parts after a setup of ${LIMIT[setup]} s (wheels from $WHEELS into $OUT/deps)"
    for name in "${PARTS[@]}"; do line "  $name: limit ${LIMIT[$name]} s: ${RUN[$name]}"; done
    line "limits sum to $TOTAL s (at most 540)"
    wheels=$(ls "$WHEELS"/*.whl 2>/dev/null | wc -l)
    line "wheels: $wheels in $WHEELS$([ "$wheels" = 0 ] && echo ' (none: run benchmarks/gpu_wheels.sh on a machine with the registry)')"
    for name in captured-step eager-cuda; do  # what pytest would run here, without running it
        cmd=${RUN[$name]%% --junitxml=*}
        line "  $name collects: $(eval "$cmd --collect-only" 2>&1 | tail -n 1)"
    done
    [ "$TOTAL" -le 540 ] || { line "FAIL: the limits sum to more than 540 s"; exit 1; }
    exit 0
fi

: >"$OUT/summary.txt"
# ---- setup: the machine, then the wheels (fail loudly: without them the CLI tests would only skip) --------
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    $PY -c "import torch, lightning; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'lightning', lightning.__version__, 'device', torch.cuda.get_device_name())" 2>&1
    echo "cpus $(nproc)"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt"
if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    line "setup: FAILED: no wheels in $WHEELS. Fetch them where the registry is reachable (bash benchmarks/gpu_wheels.sh) and bring the folder along (WHEELS=<folder>)."
    exit 2
fi
if ! timeout "${LIMIT[setup]}" $PY -m pip install -q --no-index --no-deps --target "$OUT/deps" "$WHEELS"/*.whl >"$OUT/setup.txt" 2>&1 ||
    ! $PY -c "import jsonargparse, docstring_parser, typeshed_client" >>"$OUT/setup.txt" 2>&1; then
    line "setup: FAILED installing $WHEELS into $OUT/deps: $(tail -n 1 "$OUT/setup.txt")"
    exit 2
fi
line "setup: wheels installed into $OUT/deps in $(($(date +%s) - START)) s"

# ---- the parts --------------------------------------------------------------------------------------------
declare -A RC
for name in "${PARTS[@]}"; do
    t0=$(date +%s)
    timeout --kill-after=5 "${LIMIT[$name]}" bash -c "${RUN[$name]}" >"$OUT/$name.txt" 2>&1
    RC[$name]=$?
    verdict=$([ "${RC[$name]}" = 0 ] && echo ok || ([ "${RC[$name]}" = 124 ] && echo "TIMED OUT" || echo FAILED))
    line "$name: $verdict (rc=${RC[$name]}) in $(($(date +%s) - t0)) s of ${LIMIT[$name]} s: $(tail -n 1 "$OUT/$name.txt")"
done
failed=0
for name in "${PARTS[@]}"; do [ "${RC[$name]}" = 0 ] || failed=$((failed + 1)); done
line "summary: $((${#PARTS[@]} - failed)) of ${#PARTS[@]} parts ok in $(($(date +%s) - START)) s; results in $OUT"
[ "$failed" = 0 ]
