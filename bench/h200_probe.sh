#!/usr/bin/env bash
# One device call for issue 30's judgement (READ-ONLY: no GPU setting is changed, and
# WATTLAB_FORBID_POWER_LIMITS=1 makes wattlab refuse any power-limit request; the probes are
# asked for precision only). Plan: ~60 s start-up, then bench/probe_evaluate.py on
# three models outside the reference set (ResNet-9 from bench/models, vgg11_bn, googlenet):
# 3 x 8 truth points of 4 s windows once (~220 s) and 6 probes of 40 s (~260 s).
#   bash bench/h200_probe.sh [SECONDS]   # the whole call's limit (default 520)
set -uo pipefail
total_s=${1:-520}
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
if [ -d .whl ]; then  # the GPU image has no pydantic: carried wheels (see bench/h200_wide.sh)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export WATTLAB_FORBID_POWER_LIMITS=1 PYTHONUNBUFFERED=1 WATTLAB_CACHE_DIR=/tmp/wattlab-cache
nvidia-smi --query-gpu=name,uuid,power.draw,power.limit,temperature.gpu,driver_version \
  --format=csv > "$OUT/gpu.txt" 2>&1
timeout --signal=INT "$total_s" python3 bench/probe_evaluate.py --truth-window-s 4 \
  --truth-repetitions 1 --probe-s 40 --out "$OUT" 2>&1 | tee "$OUT/probe-evaluate.txt"
gzip -k "$OUT/probe-evaluate.db" 2>/dev/null; rm -f "$OUT/probe-evaluate.db"
