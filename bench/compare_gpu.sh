#!/usr/bin/env bash
# `wattlab compare` on a real GPU (issue 41): a short sweep of one configuration measured twice
# (A/A: the gate must pass) and a deliberate regression (B: a smaller batch, expected to cost
# some 5-10 % more energy per sample on an H200; not yet measured), then `wattlab compare` on both
# pairs. READ-ONLY: no GPU setting is changed (no power limit, clock or persistence mode), and
# WATTLAB_FORBID_POWER_LIMITS=1 makes wattlab refuse any power-limit request.
#
#   bash bench/compare_gpu.sh                  # one H200: about 4-5 minutes (under 6)
#   COMPARE_CPU=1 bash bench/compare_gpu.sh    # the same steps on the CPU, tiny (the test's path)
#
# Settings (environment): REPS (repetitions per sweep; 8 on the GPU), REGRESS_BATCH (the
# regression's batch; 384 against 512), SWEEP_LIMIT_S (each sweep's limit; 95 s on the GPU),
# PYTHON (python3). Order: A1, B, A2, so the A/A pair brackets the regression in time.
# Writes at most 8 files to $OUT (default bench-out/compare-gpu): gpu.txt (nvidia-smi, GPU only),
# sweeps.log, aa.md, aa.json, ab.md, ab.json, summary.txt, compare.db.gz.
set -uo pipefail
OUT=${OUT:-bench-out/compare-gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
if [ -d .whl ] && [ "${COMPARE_CPU:-0}" != 1 ]; then  # the GPU image has no pydantic: carried
  # wheels (see bench/h200_wide.sh); the CPU path runs in the caller's Python as it is
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export WATTLAB_FORBID_POWER_LIMITS=1 PYTHONUNBUFFERED=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db=$work/compare.db

if [ "${COMPARE_CPU:-0}" = 1 ]; then
  reps=${REPS:-2}; limit_s=${SWEEP_LIMIT_S:-240}; batch_a=32; batch_b=${REGRESS_BATCH:-16}
  base="  model: mobilenet_v3_small
  stem: imagenet
  dataset: synthetic
  train_samples: 64
  test_samples: 32
  budget_samples: 64
  warmup_steps: 0
  precision: fp32
  device: cpu"
  warmup_runs=0
else
  reps=${REPS:-8}; limit_s=${SWEEP_LIMIT_S:-95}; batch_a=512; batch_b=${REGRESS_BATCH:-384}
  base="  model: resnet18
  stem: cifar
  dataset: synthetic
  train_samples: 51200
  test_samples: 2000
  budget_samples: 102400
  precision: amp-bf16
  device: cuda
  gpus: 1"
  warmup_runs=1
  nvidia-smi --query-gpu=name,uuid,power.draw,power.limit,temperature.gpu,clocks.sm,driver_version \
    --format=csv > "$OUT/gpu.txt" 2>&1
fi

spec() {  # NAME BATCH: one configuration, REPS repetitions, no cool-down
  cat > "$work/$1.yaml" <<EOF
name: $1
description: wattlab compare on a real device (bench/compare_gpu.sh)
base:
$base
grid:
  batch_size: [$2]
repetitions: $reps
order: sequential
warmup_runs: $warmup_runs
cooldown_s: 0
EOF
}
spec cmp-a1 "$batch_a"; spec cmp-b "$batch_b"; spec cmp-a2 "$batch_a"

: > "$OUT/sweeps.log"
for name in cmp-a1 cmp-b cmp-a2; do
  echo "== $name ($(date -u +%H:%M:%S))" >> "$OUT/sweeps.log"
  timeout --signal=INT "$limit_s" "$PY" -m wattlab.cli sweep "$work/$name.yaml" --db "$db" \
    >> "$OUT/sweeps.log" 2>&1
  echo "== $name exit $?" >> "$OUT/sweeps.log"
done

"$PY" -m wattlab.cli compare "$db::cmp-a1" "$db::cmp-a2" --markdown "$OUT/aa.md" \
  --json "$OUT/aa.json" > /dev/null 2>> "$OUT/sweeps.log"
aa=$?
"$PY" -m wattlab.cli compare "$db::cmp-a1" "$db::cmp-b" --markdown "$OUT/ab.md" \
  --json "$OUT/ab.json" > /dev/null 2>> "$OUT/sweeps.log"
ab=$?
{
  echo "A/A (cmp-a1 against cmp-a2, batch $batch_a): exit $aa (0 expected: the gate passes)"
  echo "A/B (cmp-a1 against cmp-b, batch $batch_b): exit $ab (1 expected when the regression is"
  echo "    larger than the smallest change these repetitions detect; see ab.md)"
  for f in aa ab; do [ -f "$OUT/$f.md" ] && sed -n 3p "$OUT/$f.md"; done
} > "$OUT/summary.txt"
gzip -c "$db" > "$OUT/compare.db.gz"
cat "$OUT/summary.txt"
