#!/usr/bin/env bash
# Batch 64 against batch 8 on the R2R-sized `default` benchmark (60 houses, 7,200 train episodes),
# CMA recipe, at equal epochs (2). The batch-8 arm is docs/results/default_cma/run.sh's run of the
# same SEED in the same WORK: same data, same frozen encoders (drawn from the seed), so the same
# teacher-forcing store (train.store_cache reuses it after checking it), and the same 11 tours.
# This script adds the batch-64 arm: configs/profiles/large_batch.yaml (sqrt rule, lr 2.83e-3,
# 12-step warm-up), 225 optimizer steps instead of 1,800, then val_unseen with and without the
# instruction. ARM=b64lin uses the linear rule (8e-3) instead. Resumable: a finished step is skipped.
# Usage: WORK=/path/outside/the/repo SEED=S [ARM=b64] [STAGE=train|eval] bash docs/results/large_batch/run_default.sh
# Compare (from the repository): ivln-ce compare WORK/eval_b64_full_sS WORK/eval_full_sS --split val_unseen --null --margin 3 --summary
set -euo pipefail
WORK=${WORK:?a folder outside the work tree}
SEED=${SEED:?the training seed of a batch-8 default_cma run in WORK}
ARM=${ARM:-b64}
STAGE=${STAGE:-train}
DATA=$WORK/synthetic_default
RECIPE=configs/embedded/cma.yaml
case $ARM in
  b64) extra=(--config configs/profiles/large_batch.yaml) ;;
  b64lin) extra=(--config configs/profiles/large_batch.yaml train.lr_rule=linear) ;;
  *) echo "unknown arm $ARM" >&2; exit 2 ;;
esac
[ -f "$DATA/manifest.json" ] || { echo "no $DATA: run docs/results/default_cma/run.sh first" >&2; exit 2; }
OUT=$WORK/cma_e2_${ARM}_s$SEED
if [ "$STAGE" = train ]; then
  [ -f "$OUT/train_summary.json" ] || ivln-ce train --config $RECIPE "${extra[@]}" data.root="$DATA" seed="$SEED" \
    train.epochs=2 train.val_split=val_seen "train.val_ablations=[none]" train.store_cache="$WORK/tf_cache" \
    train.out_dir="$OUT" results_dir="$OUT"
  exit 0
fi
TOURS=$(python -c "
import json, sys; d = json.load(open(sys.argv[1]))['val_unseen']; n = 0; out = []
for scan, tours in d.items():
    out.append(str(n)); n += len(tours)
print('[' + ','.join(out) + ']')" "$DATA/tours.json")
for ins in full none; do
  ls "$WORK/eval_${ARM}_${ins}_s$SEED"/*_stats_*val_unseen.json >/dev/null 2>&1 || ivln-ce eval --config $RECIPE \
    data.root="$DATA" eval.agent=policy eval.deterministic=true env.oracle_phases=true eval.split=val_unseen \
    eval.instruction=$ins "eval.tours=$TOURS" policy.checkpoint="$OUT/ckpt.1.pth" results_dir="$WORK/eval_${ARM}_${ins}_s$SEED"
done
