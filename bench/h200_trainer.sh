#!/usr/bin/env bash
# Issue 42's device calls (READ-ONLY: no GPU setting is changed; WATTLAB_FORBID_POWER_LIMITS=1):
#   bash bench/h200_trainer.sh speed [SECONDS]     # the throughput bench on ResNet-50 CIFAR stem
#       at batch 256/512/1024 with a torch.compile row, then a torch.profiler split of one step
#   bash bench/h200_trainer.sh accuracy [SECONDS]  # CUDA graphs vs eager (ResNet-50 CIFAR stem,
#       3 seeds each), then the accuracy table under today's defaults (demo grid, seed 0, and the
#       reference models)
# SECONDS caps the whole stage (default 560). At most 6 files come back in $OUT: info.txt,
# trainer.log and the benches' JSON (and graphs_accuracy.log).
set -uo pipefail
stage=${1:?speed or accuracy}
total_s=${2:-560}
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
# shellcheck source=bench/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"  # carried wheels into /tmp/site; PYTHONPATH
export WATTLAB_FORBID_POWER_LIMITS=1 PYTHONUNBUFFERED=1 WATTLAB_CACHE_DIR=/tmp/wattlab-cache OUT
{
  git log --oneline -1 2>/dev/null
  nvidia-smi --query-gpu=name,uuid,power.draw,power.limit,temperature.gpu,clocks.sm,driver_version \
    --format=csv 2>&1
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} > "$OUT/info.txt" 2>&1
start=$(date +%s)
left() { echo $((total_s - ($(date +%s) - start))); }
run() {  # LIMIT_S COMMAND...: one bench, cut at its share of the stage
  echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/trainer.log"
  timeout --signal=INT "$@" 2>&1 | tee -a "$OUT/trainer.log"
}
case $stage in
  speed)
    run "$(left)" python3 bench/train_throughput.py --workloads resnet50:cifar \
      --batches 256 512 1024 --seconds 4 --compile --profile ;;
  accuracy)
    run 200 python3 bench/graphs_accuracy.py --models resnet50:cifar
    run "$(left)" python3 bench/accuracy_spread.py --grid demo reference --seeds 0 --out "$OUT" ;;
  *) echo "unknown stage $stage: speed or accuracy"; exit 2 ;;
esac
echo "== $(date -u +%H:%M:%S) done ($(( $(date +%s) - start )) s)" | tee -a "$OUT/trainer.log"
