#!/usr/bin/env bash
# One device call of issue 47's H100 collection (READ-ONLY: no GPU setting is changed, and
# WATTLAB_FORBID_POWER_LIMITS=1 makes wattlab refuse any power-limit request).
#   bash bench/h100_collect.sh collect SECONDS [SKIP_FROM]   # bench/collect_interleaved.py
#   bash bench/h100_collect.sh check SECONDS                 # collected windows vs wattlab run
# `check`: for each of CHECKS (model:precision:batch:budget_samples), the collector measures the
# configuration in its windows, then `wattlab run` trains it with the same data size and no
# per-epoch evaluation, on the same card in the same call; bench/reference_from_windows.py
# --check compares the two. Everything lands in $OUT/MODE.tgz (at most 8 files return from a call).
set -uo pipefail
mode=${1:?collect or check}
total_s=${2:-540}
OUT=${OUT:-bench-out}
top=$OUT
OUT=$top/$mode  # each mode's files in a folder of its own, tarred into $top/$mode.tgz at the end
mkdir -p "$OUT"
# shellcheck source=bench/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh" 2>&1 | tee -a "$OUT/call.log"
source "$(dirname "$0")/gpu_env.sh" >/dev/null 2>&1  # the exports (a pipe ran it in a subshell)
export WATTLAB_FORBID_POWER_LIMITS=1 PYTHONUNBUFFERED=1 WATTLAB_CACHE_DIR=/tmp/wattlab-cache
t0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,power.draw,power.limit,temperature.gpu,driver_version \
  --format=csv > "$OUT/gpu.txt" 2>&1
git log --oneline -1 > "$OUT/commit.txt" 2>/dev/null
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])" >> "$OUT/gpu.txt"
if [ "$mode" = collect ]; then
  skip=${3:-}
  timeout --signal=INT "$total_s" python3 bench/collect_interleaved.py --out "$OUT" \
    --seconds $((total_s - 15)) ${skip:+--skip-from "$skip"} 2>&1 | tee "$OUT/collect.log"
else
  CHECKS=${CHECKS:-"resnet50:amp-bf16:256:100000 mobilenet_v2:fp32:32:10000 vgg16:tf32:2048:400000"}
  configs=""; for c in $CHECKS; do configs="$configs ${c%:*}"; done
  # shellcheck disable=SC2086  # a word list
  timeout --signal=INT 75 python3 bench/collect_interleaved.py --out "$OUT" --configs $configs \
    --seconds 65 --window-s 3 --max-window-s 3 2>&1 | tee "$OUT/check.log"
  mkdir -p "$OUT/raw"
  for c in $CHECKS; do
    IFS=: read -r model precision batch budget <<< "$c"
    [ $(( $(date +%s) - t0 + 30 )) -lt "$total_s" ] || break
    timeout --signal=INT 60 python3 -m wattlab.cli run --model "$model" --precision "$precision" \
      --batch-size "$batch" --budget-samples "$budget" --train-samples 4096 --test-samples 256 \
      --epoch-eval-samples 0 --db /tmp/check.db --json "$OUT/raw/run-$model.json" --no-progress \
      2>&1 | tee -a "$OUT/check.log"
  done
fi
echo "call: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/call.log"
tar czf "$top/$mode.tgz" -C "$top" "$mode" && rm -rf "${OUT:?}"
