#!/usr/bin/env bash
# Publish what run_default.sh produced for ARM and SEED into this folder: the training summary and
# config, the two evaluations' summaries, and the comparisons: against the batch-8 CMA run of the same
# seed (`--null --margin 3`: does batch 64 reach batch 8?), and the arm's own gate (full instruction -
# none and - random agent, `--expect greater`). The batch-8 side is WORK/eval_full_sS (eval_full for
# seed 0) when present, else the committed ../default_cma report that kept its per-tour values
# (`REPORT.json#a`); the random agent likewise (../default_cma/full_vs_random_val_unseen.json#b).
# AT_EPOCHS="E ..." adds the checkpoints after those epochs that run_default.sh evaluated with AT_EPOCH=E (full
# instruction only): their summaries, and each against batch 8 (`--null --margin 3`).
# Usage: WORK=/path/of/run_default.sh SEED=4 [ARM=b64] [AT_EPOCHS="8 4"] bash docs/results/large_batch/publish_default.sh
set -euo pipefail
WORK=${WORK:?the folder of run_default.sh}
SEED=${SEED:?the seed to publish}
ARM=${ARM:-b64}
WORK=$(cd "$WORK" && pwd)
cd "$(dirname "$0")"
# side, cma_side, random_side, compare, copy_stats, copy_run
source ../publish_lib.sh

SUFFIX=$([ "$SEED" = 0 ] && echo "" || echo "_s$SEED")  # run_default.sh's (default_cma/run.sh's) naming
B8=$(cma_side "$WORK" "$SEED")
RANDOM_SIDE=$(random_side "$WORK")
tag=default_${ARM}_s$SEED
copy_run "$WORK/cma_e2_$ARM$SUFFIX" "$tag" "$WORK/eval_$ARM" "$SUFFIX" "$tag"
FULL=$WORK/eval_${ARM}_full$SUFFIX
compare "${tag}_vs_b8_val_unseen" "$FULL" "$B8" --null --margin 3
compare "${tag}_full_vs_none_val_unseen" "$FULL" "$WORK/eval_${ARM}_none$SUFFIX" --expect greater
compare "${tag}_full_vs_random_val_unseen" "$FULL" "$RANDOM_SIDE" --expect greater
for ep in ${AT_EPOCHS:-}; do
  MID=$WORK/eval_${ARM}ep${ep}_full$SUFFIX
  copy_stats "$MID" "${tag}_ep${ep}_full_eval_val_unseen_stats.json"
  compare "${tag}_ep${ep}_vs_b8_val_unseen" "$MID" "$B8" --null --margin 3
done
