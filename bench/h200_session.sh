#!/usr/bin/env bash
# What was run on the lent H200 (device tool), in stages; each stage is one call.
# READ-ONLY: no stage changes a GPU setting; WATTLAB_FORBID_POWER_LIMITS=1 makes wattlab refuse
# any power-limit request. Results land in $OUT (the device tool brings them back).
#   bash bench/h200_session.sh a   # meters vs NVML, monitor overhead, throughput, 2 runs + CodeCarbon
#   bash bench/h200_session.sh b   # the reference runs for PRE/STEP, and their evaluation
#   bash bench/h200_session.sh c   # the h200-1gpu sweep without its power-limit axis, and its report
#   bash bench/h200_session.sh d   # b and c squeezed into one call, with deadlines
# On 2026-12-02 stages a and d were run (the session's device time allowed two calls); the
# docs/results-h200.md and docs/engine.md report what they printed.
set -uo pipefail
stage=${1:?stage a, b or c}
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
# shellcheck source=bench/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"  # carried wheels into /tmp/site; PYTHONPATH
export WATTLAB_FORBID_POWER_LIMITS=1 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
log="$OUT/log-$stage.txt"
say() { echo "== $*" | tee -a "$log"; }
step() { say "$1"; shift; ( "$@" ) 2>&1 | tee -a "$log"; }

step "gpu" nvidia-smi --query-gpu=name,power.draw,power.limit,power.default_limit,temperature.gpu --format=csv
case "$stage" in
  a)
    step "devices" python3 -m wattlab.cli devices --json "$OUT/devices.json"
    step "devices table" python3 -m wattlab.cli devices
    step "validate_nvml" timeout 120 python3 bench/validate_nvml.py --seconds 20
    step "monitor_overhead" timeout 150 python3 bench/monitor_overhead.py --pairs 8 --steps 60
    step "train_throughput" timeout 200 python3 bench/train_throughput.py --samples 150000
    for p in fp32 amp-bf16; do
      step "run $p" timeout 200 python3 -m wattlab.cli run --model resnet50 --stem cifar \
        --epochs 2 --precision "$p" --codecarbon --project-after-epochs 2 --db "$OUT/runs.db" \
        --no-progress
    done
    ;;
  b)
    step "reference" timeout 420 python3 bench/collect_reference.py --db "$OUT/reference.db" \
      --csv "$OUT/h200-reference.csv" --epochs 5 --train-samples 10000 --deadline-s 300 \
      --models resnet18 resnet50 mobilenet_v2 efficientnet_b0
    step "evaluate" timeout 120 python3 -m wattlab.cli estimate evaluate \
      --data "$OUT/h200-reference.csv" --json "$OUT/evaluation.json"
    ;;
  c)
    step "sweep plan" python3 -m wattlab.cli sweep bench/h200-1gpu-readonly.yaml \
      --db "$OUT/sweep.db" --dry-run
    step "sweep" timeout 480 python3 -m wattlab.cli sweep bench/h200-1gpu-readonly.yaml \
      --db "$OUT/sweep.db"
    step "report" python3 -m wattlab.cli report --db "$OUT/sweep.db" --json "$OUT/summary.json"
    ;;
  d)
    step "validate_nvml" timeout 60 python3 bench/validate_nvml.py --seconds 20
    step "reference" timeout 200 python3 bench/collect_reference.py --db "$OUT/reference.db" \
      --csv "$OUT/h200-reference.csv" --epochs 5 --train-samples 10000 --test-samples 2000 \
      --deadline-s 160 --models mobilenet_v2 resnet18 resnet50
    step "evaluate" timeout 50 python3 -m wattlab.cli estimate evaluate \
      --data "$OUT/h200-reference.csv" --json "$OUT/evaluation.json"
    step "sweep" timeout 250 python3 -m wattlab.cli sweep bench/h200-1gpu-readonly.yaml \
      --db "$OUT/sweep.db"
    ;;
esac
say "done"
