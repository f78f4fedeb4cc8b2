#!/usr/bin/env bash
# One device call of the families grid (issue 21): READ-ONLY (no GPU setting is changed;
# WATTLAB_FORBID_POWER_LIMITS=1 makes wattlab refuse any power-limit request). The database
# travels in .devout/ (carried on every call) and comes back in $OUT.
#   bash bench/h200_families.sh PASS MINUTES
set -uo pipefail
pass_no=${1:-1}
minutes=${2:-8.3}
OUT=${OUT:-bench-out}
mkdir -p "$OUT" .devout
# shellcheck source=bench/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"  # carried wheels into /tmp/site; PYTHONPATH
export WATTLAB_FORBID_POWER_LIMITS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,uuid,power.draw,power.limit,temperature.gpu,driver_version --format=csv \
  | tee "$OUT/gpu.txt"
python3 bench/collect_reference.py --grid families --pass "$pass_no" --db .devout/families.db \
  --csv "$OUT/h200-families.csv" --max-minutes "$minutes" 2>&1 | tee "$OUT/collect.log" \
  | tail -80
cp .devout/families.db "$OUT/families.db"
