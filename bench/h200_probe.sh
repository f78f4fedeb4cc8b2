#!/usr/bin/env bash
# One device call for issue 37's judgement (READ-ONLY: no GPU setting is changed, and
# WATTLAB_FORBID_POWER_LIMITS=1 makes wattlab refuse any power-limit request; the probes are
# asked for precision only): bench/probe_evaluate.py's defaults, cut at the call's limit (every
# pair is written as it finishes). TRUTH_FROM=DIR reuses truth-*.json measured by an earlier call;
# MODELS="m1 m2" and BATCHES="768" restrict the pairs (default: probe_evaluate.py's).
#   bash bench/h200_probe.sh [SECONDS]   # the whole call's limit (default 545)
set -uo pipefail
total_s=${1:-545}
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
# shellcheck source=bench/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"  # carried wheels into /tmp/site; PYTHONPATH
export WATTLAB_FORBID_POWER_LIMITS=1 PYTHONUNBUFFERED=1 WATTLAB_CACHE_DIR=/tmp/wattlab-cache
nvidia-smi --query-gpu=name,uuid,power.draw,power.limit,temperature.gpu,driver_version \
  --format=csv > "$OUT/gpu.txt" 2>&1
git log --oneline -1 > "$OUT/commit.txt" 2>/dev/null
# shellcheck disable=SC2086  # MODELS and BATCHES are word lists
timeout --signal=INT "$total_s" python3 bench/probe_evaluate.py ${TRUTH_FROM:+--truth-from "$TRUTH_FROM"} \
  ${MODELS:+--models $MODELS} ${BATCHES:+--batches $BATCHES} \
  --out "$OUT" 2>&1 | tee "$OUT/probe-evaluate.txt"
tar czf "$OUT/raw.tgz" -C "$OUT" raw && rm -rf "$OUT/raw"  # at most 8 files come back
