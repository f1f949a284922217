#!/usr/bin/env bash
# What a lent GPU machine is for (docs/gpu-reference), in one call, in order of value:
#   1. CPU scaling past 2 processes, which no 2-core machine can show: PyG GraphSAGE and GAT on
#      CPU_DATASET at 1, 2, 4 and 8 processes, batch CPU_BATCH, no loader workers, one intra-op thread
#      per rank, the timing grid's stop rule, REPEATS rounds (the process counts' order turned
#      round each round). The projection from the 1- and 2-process runs alone is then compared
#      with the 4- and 8-process runs where the analysis lane is (analysis.projection).
#   2. A graph that fills the GPU: PyG GraphSAGE and GAT at 1 GPU on GPU_DATASET, batch 1,024,
#      breakdown on, NVML every 0.1 s, steps capped (an uncapped reddit-shape epoch is about 150
#      steps of the CPU sampler), with 0 and 4 loader workers (PyG's multi-GPU example uses 4).
#   3. gpu-check's runs, faults and `gpu` tests (runners.checks.gpu_check), for what is left of
#      the call's time.
# What it costs on an H200 (docs/gpu-reference): a CPU run on `small` about 35 s whole, preparing
# reddit-shape 43 s, a GPU run on it 50-80 s. Its 15 minutes hold part 1 at 2 rounds (16 runs) or
# parts 2 and 3, not all three: choose with PARTS and REPEATS.
# Each run is added to its part's tar in $OUT as it ends, so a call cut off keeps what ran;
# DEADLINE (epoch seconds; default BUDGET_S from now) bounds the GPU runs and gpu-check.
# The lane is made beforehand (make setup LANE=own PYTHON=python3; packages the machine lacks
# travel as wheels, docs/gpu-reference). Rehearse on a CPU machine:
#   OUT=/tmp/o PY=.venv-current/bin/python CPU_DATASET=tiny GPU_DATASET=tiny DEVICE=cpu REPEATS=1 \
#     GPU_WORKERS=0 PARTS="1 2" scripts/device_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder that comes back}
PY=${PY:-.venv-own/bin/python}
CPU_DATASET=${CPU_DATASET:-small}
CPU_BATCH=${CPU_BATCH:-1024}
GPU_DATASET=${GPU_DATASET:-reddit-shape}
DEVICE=${DEVICE:-cuda}
REPEATS=${REPEATS:-3}
COUNTS=${COUNTS:-1 2 4 8}
GPU_WORKERS=${GPU_WORKERS:-0 4}
GPU_STEPS=${GPU_STEPS:-10}
PARTS=${PARTS:-1 2 3}
DEADLINE=${DEADLINE:-$(( $(date +%s) + ${BUDGET_S:-560} ))}  # epoch seconds by which to be done
WORK=${WORK:-results/device-check}
DATA_ROOT=${DATA_ROOT:-results/datasets}
mkdir -p "$OUT" "$WORK"
say() { echo "[device-check $(date +%H:%M:%S)] $*" | tee -a "$OUT/log.txt"; }
left() { echo $(( DEADLINE - $(date +%s) )); }
# one tar per part, each run appended as it ends (a part cut off by the call's limit kept nothing
# on the first try, when a part was packed only at its end)
keep() { tar -rf "$OUT/$(dirname "$1").tar" -C "$WORK" "$1" "$1.log"; }

{
    date -u; uname -a; nproc; free -g | head -2
    nvidia-smi --query-gpu=name,memory.total,driver_version,pci.bus_id --format=csv 2>&1
    "$PY" -c 'import sys, torch, torch_geometric as g; print(sys.version.split()[0], torch.__version__, torch.version.cuda, g.__version__)'
    "$PY" -m pip list 2>/dev/null | grep -i -E '^(torch|torch.geometric|torch.scatter|torch.sparse|pyg.lib|numpy) '
} > "$OUT/machine.txt" 2>&1

run() { # out-dir, then the runner's own arguments
    local out=$1; shift
    "$PY" -m runners.run --framework pyg --data-root "$DATA_ROOT" --out "$out" "$@" >> "$out.log" 2>&1
    keep "${out#"$WORK"/}"
    say "$(basename "$out"): $("$PY" -c 'import json, sys; r = json.load(open(sys.argv[1])); s = r.get("summary") or {}; print(r["status"], s.get("median_epoch_time_s"))' "$out/result.json" 2>&1 | tail -1)"
}

if [[ " $PARTS " == *" 1 "* ]]; then
    say "part 1: CPU scaling on $CPU_DATASET, processes $COUNTS, $REPEATS rounds ($(left) s left)"
    "$PY" -m runners.datasets prepare --root "$DATA_ROOT" "$CPU_DATASET" >> "$OUT/log.txt" 2>&1
    mkdir -p "$WORK/cpu-scaling"
    order=$COUNTS
    for rep in $(seq 1 "$REPEATS"); do
        for d in $order; do
            for model in sage gat; do
                # the stop rule is config/config.yaml's `timing` block, written out: the runner's
                # flags come from a config only through Snakemake's schema defaults
                run "$WORK/cpu-scaling/pyg-$model-d$d-r$rep" --model "$model" --devices "$d" --batch-size "$CPU_BATCH" \
                    --workers 0 --dataset "$CPU_DATASET" --device cpu --threads-per-rank 1 --repeat "$rep" \
                    --until precise --precision 0.05 --min-steady-epochs 3 --epochs 4 --max-train-time 4 \
                    --eval-every end --time-limit 120
            done
        done
        order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
    done
fi

if [[ " $PARTS " == *" 2 "* ]]; then
    say "part 2: $GPU_DATASET on $DEVICE, workers $GPU_WORKERS ($(left) s left)"
    /usr/bin/time -f "prepare $GPU_DATASET: %e s, %M KB peak" "$PY" -m runners.datasets prepare --root "$DATA_ROOT" "$GPU_DATASET" >> "$OUT/log.txt" 2>&1
    mkdir -p "$WORK/gpu-graph"
    for model in sage gat; do
        for w in $GPU_WORKERS; do
            [ "$(left)" -gt 75 ] || { say "pyg-$model-w$w: not run, $(left) s left"; continue; }
            run "$WORK/gpu-graph/pyg-$model-w$w" --model "$model" --devices 1 --batch-size 1024 --workers "$w" \
                --dataset "$GPU_DATASET" --device "$DEVICE" --epochs 3 --max-steps-per-epoch "$GPU_STEPS" \
                --breakdown on --nvml-sample-interval 0.1 --eval-every 0 --time-limit 150
            nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/log.txt" 2>&1
        done
    done
fi

if [[ " $PARTS " == *" 3 "* ]]; then
    t=$(( $(left) - 15 ))
    say "part 3: gpu-check, $t s"
    if [ "$t" -gt 60 ]; then
        timeout "$t" "$PY" -m runners.checks.gpu_check --analysis-python "$PY" --epochs 5 \
            --out "$WORK/gpu-check" > "$OUT/gpu-check.txt" 2>&1
        say "gpu-check exit $?; GPU processes after: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>&1 | wc -l)"
        tar -rf "$OUT/gpu-check.tar" -C "$WORK" gpu-check
    fi
fi
say "done ($(left) s left)"
