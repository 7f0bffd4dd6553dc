#!/usr/bin/env bash
# CMA, the embedded recipe (batch 8, lr 1e-3, small frozen encoders, 64 px), trained on the
# R2R-sized `default` synthetic benchmark (60 houses, 7,200 train episodes) for 2 epochs, seed SEED,
# with teacher-forced validation on val_seen after every epoch, with and without instructions.
# With STAGE=eval: the last checkpoint on val_unseen, the first tour of each of the 11 held-out
# houses, with its instruction, without it, and the random agent on the same tours.
# Resumable: a finished step is skipped, a killed training resumes.
# SEED (default 0) names the training seed; seed 0 writes cma_e2 and eval_{full,none}, seed N
# cma_e2_sN and eval_{full,none}_sN. The random agent does not depend on it and runs once.
# A variant of the recipe (../large_batch/run_default.sh) sets NAME and TRAIN_EXTRA (more `ivln-ce train`
# arguments, split on spaces): it writes cma_e2_NAME_sN and eval_NAME_{full,none}_sN instead; it may set
# EPOCHS (default 2, the recipe's budget here), and the evaluation then reads the last epoch's checkpoint.
# STAGE=eval with AT_EPOCH=E (1 to EPOCHS - 1) evaluates the checkpoint after epoch E instead, with the full
# instruction only, into eval_NAMEepE_full_sN (a point on the training curve; no run of its own).
# Usage: WORK=/path/outside/the/repo [SEED=0] [STAGE=train|eval] [AT_EPOCH=E] bash docs/results/default_cma/run.sh
set -euo pipefail
WORK=${WORK:?a folder outside the work tree}
STAGE=${STAGE:-train}
SEED=${SEED:-0}
SUFFIX=$([ "$SEED" = 0 ] && echo "" || echo "_s$SEED")
NAME=${NAME:-}
EPOCHS=${EPOCHS:-2}
read -r -a extra <<< "${TRAIN_EXTRA:-}"
DATA=$WORK/synthetic_default
RECIPE=configs/embedded/cma.yaml
[ -f "$DATA/manifest.json" ] || ivln-ce data synth --preset default --out "$DATA"
OUT=$WORK/cma_e2${NAME:+_$NAME}$SUFFIX
EVAL=$WORK/eval${NAME:+_$NAME}
if [ "$STAGE" = train ]; then
  [ -f "$OUT/train_summary.json" ] || ivln-ce train --config $RECIPE ${extra[@]+"${extra[@]}"} data.root="$DATA" seed="$SEED" train.epochs="$EPOCHS" \
    train.val_split=val_seen "train.val_ablations=[none]" train.store_cache="$WORK/tf_cache" \
    train.out_dir="$OUT" results_dir="$OUT"
  exit 0
fi
TOURS=$(python -c "
import json, sys; d = json.load(open(sys.argv[1]))['val_unseen']; n = 0; out = []
for scan, tours in d.items():
    out.append(str(n)); n += len(tours)
print('[' + ','.join(out) + ']')" "$DATA/tours.json")
AT_EPOCH=${AT_EPOCH:-$EPOCHS}
INSTRUCTIONS="full none"
if [ "$AT_EPOCH" != "$EPOCHS" ]; then
  [[ "$AT_EPOCH" =~ ^[1-9][0-9]*$ ]] && [ "$AT_EPOCH" -lt "$EPOCHS" ] || { echo "AT_EPOCH=$AT_EPOCH: not an epoch before the last ($EPOCHS)" >&2; exit 2; }
  EVAL=${EVAL}ep$AT_EPOCH INSTRUCTIONS=full
fi
for ins in $INSTRUCTIONS; do
  ls "${EVAL}_$ins$SUFFIX"/*_stats_*val_unseen.json >/dev/null 2>&1 || ivln-ce eval --config $RECIPE data.root="$DATA" \
    eval.agent=policy eval.deterministic=true env.oracle_phases=true eval.split=val_unseen eval.instruction=$ins \
    "eval.tours=$TOURS" policy.checkpoint="$OUT/ckpt.$((AT_EPOCH - 1)).pth" results_dir="${EVAL}_$ins$SUFFIX"
done
ls "$WORK/eval_random"/*_stats_*val_unseen.json >/dev/null 2>&1 || ivln-ce eval --config $RECIPE data.root="$DATA" \
  eval.agent=random policy.name=none env.oracle_phases=true eval.split=val_unseen "eval.tours=$TOURS" results_dir="$WORK/eval_random"
