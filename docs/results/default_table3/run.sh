#!/usr/bin/env bash
# Table 3 at R2R size: a latent-memory model (MODEL = tour_cma, pool_cma or pool_end_cma) trained
# on the `default` synthetic benchmark with CMA's budget of docs/results/default_cma/run.sh
# (batch 8, lr 1e-3, 2 epochs, small frozen encoders, 64 px), tour-sequential as the recipe says
# (no per-episode validation: these models carry their memory across a tour's episodes).
# With STAGE=eval: the last checkpoint on val_unseen, the first tour of each of the 11 held-out
# houses, with its instruction and without it (the gate), on the tours default_cma evaluates.
# Resumable: a finished step is skipped, a killed training resumes.
# Usage: WORK=/path/outside/the/repo MODEL=tour_cma [SEED=0] [STAGE=train|eval] [EXTRA="key=value ..."] \
#   bash docs/results/default_table3/run.sh
# WORK is the folder of default_cma/run.sh: its synthetic_default and store cache are shared.
set -euo pipefail
WORK=${WORK:?a folder outside the work tree}
MODEL=${MODEL:?tour_cma, pool_cma or pool_end_cma}
STAGE=${STAGE:-train}
SEED=${SEED:-0}
EXTRA=${EXTRA:-}
case "$MODEL" in tour_cma|pool_cma|pool_end_cma) ;; *) echo "MODEL=$MODEL: tour_cma, pool_cma or pool_end_cma" >&2; exit 2 ;; esac
DATA=${DATA:-$WORK/synthetic_default}
RECIPE=configs/embedded/$MODEL.yaml
[ -f "$DATA/manifest.json" ] || ivln-ce data synth --preset default --out "$DATA"
OUT=$WORK/${MODEL}_e2_s$SEED
if [ "$STAGE" = train ]; then
  # shellcheck disable=SC2086
  [ -f "$OUT/train_summary.json" ] || ivln-ce train --config "$RECIPE" data.root="$DATA" seed="$SEED" train.epochs=2 \
    train.lr=1e-3 train.store_cache="$WORK/tf_cache" \
    train.out_dir="$OUT" results_dir="$OUT" $EXTRA
  exit 0
fi
TOURS=$(python -c "
import json, sys; d = json.load(open(sys.argv[1]))['val_unseen']; n = 0; out = []
for scan, tours in d.items():
    out.append(str(n)); n += len(tours)
print('[' + ','.join(out) + ']')" "$DATA/tours.json")
LAST=$(ls "$OUT"/ckpt.*.pth | sed 's/.*ckpt\.\([0-9]*\)\.pth/\1/' | sort -n | tail -1)
for ins in full none; do
  # shellcheck disable=SC2086
  ls "$WORK/eval_${MODEL}_${ins}_s$SEED"/*_stats_*val_unseen.json >/dev/null 2>&1 || ivln-ce eval --config "$RECIPE" \
    data.root="$DATA" eval.agent=policy eval.deterministic=true env.oracle_phases=true eval.split=val_unseen \
    eval.instruction=$ins "eval.tours=$TOURS" policy.checkpoint="$OUT/ckpt.$LAST.pth" \
    results_dir="$WORK/eval_${MODEL}_${ins}_s$SEED" $EXTRA
done
