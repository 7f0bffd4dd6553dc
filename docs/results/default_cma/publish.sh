#!/usr/bin/env bash
# Publish what run.sh produced for one CMA seed into this folder: the training summary and config,
# the two evaluations' val_unseen summaries, summarize.py's printout and the seed's gate reports
# (full - none and full - random, `--expect greater`). With POOL="0 1 ..." instead of SEED: the pooled
# gate reports of those seeds (one A B pair per seed), seedsNNN_full_vs_{none,random}_val_unseen.
#
# In a POOL, a seed's results folder may be gone (a lost machine, a pruned disk): its sides are then read
# from the committed report that kept its per-tour values (`ivln-ce compare REPORT.json#a`, see `ivln-ce
# compare --help`): seed s's `{,sS_}full_vs_none_val_unseen.json#a` (full) and `#b` (none); the random
# agent's `full_vs_random_val_unseen.json#b` (in both modes). A folder, when present, wins. SEED=s needs
# the run's folders (WORK/cma_e2_sS with its val_store, WORK/eval_{full,none}_sS). Seed 0 was published by
# hand at a8ee31c (its reports carry `--null --margin 3`); SEED=0 is refused, POOL may name it. POOL's
# seeds are single digits, each once (the report names concatenate them: seeds012345).
# Usage: WORK=/path/of/run.sh SEED=5 bash docs/results/default_cma/publish.sh
#        WORK=/path/of/run.sh POOL="0 1 2 3 4 5" bash docs/results/default_cma/publish.sh
set -euo pipefail
WORK=${WORK:?the folder of run.sh}
WORK=$(CDPATH= cd -- "$WORK" && pwd)  # absolute before the cd below: a relative WORK would miss its folders
HERE=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
cd "$HERE"
# cma_side, cma_none_side, random_side (reading this folder's reports), compare, copy_run, check_pool
CMA_REPORTS=
source ../publish_lib.sh

RANDOM_SIDE=$(random_side "$WORK")
if [ -n "${POOL:-}" ]; then
  check_pool
  read -r -a seeds <<< "$POOL"
  gate_none=(); gate_random=()
  for s in "${seeds[@]}"; do
    full=$(cma_side "$WORK" "$s"); none=$(cma_none_side "$WORK" "$s")
    gate_none+=("$full" "$none")
    gate_random+=("$full" "$RANDOM_SIDE")
  done
  tag=seeds$(printf '%s' "${seeds[@]}")
  compare "${tag}_full_vs_none_val_unseen" "${gate_none[@]}" --expect greater
  compare "${tag}_full_vs_random_val_unseen" "${gate_random[@]}" --expect greater
  exit 0
fi

SEED=${SEED:?the seed to publish (or POOL="0 1 ...")}
[[ "$SEED" =~ ^[1-9][0-9]*$ ]] || { echo "SEED=$SEED: a seed from 1 up (seed 0 was published by hand)" >&2; exit 2; }
copy_run "$WORK/cma_e2_s$SEED" "cma_e2_s$SEED" "$WORK/eval" "_s$SEED" "s$SEED"
python summarize.py "$WORK/cma_e2_s$SEED" > "summary_s$SEED.txt.tmp" || { rm -f "summary_s$SEED.txt.tmp"; exit 1; }
mv "summary_s$SEED.txt.tmp" "summary_s$SEED.txt"
FULL=$WORK/eval_full_s$SEED
compare "s${SEED}_full_vs_none_val_unseen" "$FULL" "$WORK/eval_none_s$SEED" --expect greater
compare "s${SEED}_full_vs_random_val_unseen" "$FULL" "$RANDOM_SIDE" --expect greater
