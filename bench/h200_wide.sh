#!/usr/bin/env bash
# One device call for issues 29 and 31 (READ-ONLY: no GPU setting is changed, and
# WATTLAB_FORBID_POWER_LIMITS=1 makes wattlab refuse any power-limit request):
#   1. what the GPU image's own Python has, and the CLI smoke tests in it (issue 31), carrying only
#      what it lacks (pydantic and its parts from .whl/; typing_extensions only if older than 4.16);
#   2. (stage "first" only) what cuDNN's autotuning costs a warm-up (bench/autotune_cost.py);
#   3. a stint of the wide reference grid, resuming the database carried in .devout/.
#   bash bench/h200_wide.sh STAGE SECONDS PASS  # STAGE: first | more; SECONDS: the whole call's
#   share of the device command's limit (the collection gets what the steps before it leave,
#   less 40 s for the CSV and the copy)
set -uo pipefail
stage=${1:-more}
total_s=${2:-560}
pass_no=${3:-1}  # each stint a sweep of its own: the points earlier stints measured are left out
OUT=${OUT:-bench-out}
mkdir -p "$OUT" .devout
log="$OUT/call.log"
say() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$log"; }
t0=$(date +%s)
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  have=$(python3 -c "import importlib.metadata as m; print(m.version('typing_extensions'))" 2>/dev/null)
  if python3 -c "import sys; v=tuple(int(x) for x in '$have'.split('.')[:2]); sys.exit(v >= (4, 16))"; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/ifold/*.whl
    echo "typing_extensions $have < 4.16: carried 4.16.0" | tee -a "$log"
  fi
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export WATTLAB_FORBID_POWER_LIMITS=1 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
export WATTLAB_CACHE_DIR=/tmp/wattlab-cache

say "gpu"
nvidia-smi --query-gpu=name,uuid,power.draw,power.limit,temperature.gpu,driver_version \
  --format=csv 2>&1 | tee -a "$log" | tee "$OUT/gpu.txt"
say "packages (the image's own unless carried above)"
python3 -m pip list 2>/dev/null | grep -iE '^(typer|click|rich|pydantic|pydantic.core|numpy|pandas|scipy|scikit-learn|matplotlib|torch|torchvision|nvidia-ml-py|psutil|pyyaml|typing.extensions|hypothesis|pytest|pytest-xdist|transformers|pytorch-lightning|lightning)\s' \
  | tee -a "$log"
python3 --version 2>&1 | tee -a "$log"

if [ "$stage" = first ]; then
  say "smoke tests in the image's own Python"
  timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 tests/cli/test_cli_smoke.py 2>&1 \
    | tail -40 | tee "$OUT/smoke.txt" | tee -a "$log"
  say "autotune cost"
  timeout 130 python3 bench/autotune_cost.py --configs resnet50:fp32:512 \
    mobilenet_v2:amp-bf16:128 --settings limit10 limit3 off --json "$OUT/autotune.json" 2>&1 \
    | tee "$OUT/autotune.txt" | tee -a "$log"
fi

left_s=$(( total_s - ($(date +%s) - t0) - 40 ))
minutes=$(python3 -c "print(round(max(0.5, $left_s / 60), 2))")
say "wide grid, ${minutes} min"
python3 bench/collect_reference.py --grid wide --db .devout/wide.db --csv "$OUT/h200-wide.csv" \
  --pass "$pass_no" --cooldown-s 0 --limit-points "${LIMIT_POINTS:-60}" --max-minutes "$minutes" 2>&1 | tee "$OUT/collect.log" | tail -60
tail -3 "$OUT/collect.log" >> "$log"
cp .devout/wide.db "$OUT/wide.db"
say "call done after $(( $(date +%s) - t0 )) s"
