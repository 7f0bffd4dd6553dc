#!/usr/bin/env bash
# Publish what run.sh produced for one seed of MODEL into this folder: the training summary and
# config, the two evaluations' summaries, and the README's comparisons (the gate: full - none and
# full - random, `--expect greater`; against CMA: its paired seed and the other CMA seeds, `--null
# --margin 3`; against its paired seed also as the paper's claim, `--expect less --paper -2`). With
# POOL="0 1 ..." instead of SEED: the pooled reports of those seeds (one A B pair per seed), the gate
# pairs and against CMA both as the null claim and as the paper's claim. The paper's claim (Table 3,
# Val-Unseen t-nDTW: CMA 38, TourCMA 36, PoolCMA 36, PoolEndCMA 38) is a 2-point deficit for
# TourCMA and PoolCMA; PoolEndCMA's is the null claim alone.
#
# A run's results folder may be gone (a lost machine, a pruned disk): each side is then read from
# the committed report that kept its per-tour values (`ivln-ce compare REPORT.json#a`, see
# `ivln-ce compare --help`); the report says so in its notes. CMA seed s: ../default_cma's
# `{,s1_,...,s5_}full_vs_none_val_unseen.json#a`; the random agent: `../default_cma/full_vs_random_val_unseen.json#b`;
# this model's seed s: `MODEL_s{s}_full_vs_none_val_unseen.json#a` (full) and `#b` (none).
# A folder, when present, wins. CMA_SEEDS (default "0 1 2 3 4", the CMA seeds run at `default` before TourCMA
# seed 5) names the CMA seeds that SEED=s is also compared with, unpaired (each but s); the committed unpaired reports of seeds
# 0-3 used CMA seeds 0-2 (TourCMA seeds 0-2 have none): CMA_SEEDS="0 1 2" reproduces them.
# Usage: WORK=/path/of/run.sh MODEL=pool_cma SEED=1 bash docs/results/default_table3/publish.sh
#        WORK=/path/of/run.sh MODEL=pool_cma POOL="0 1" bash docs/results/default_table3/publish.sh
set -euo pipefail
WORK=${WORK:?the folder of run.sh}
MODEL=${MODEL:?tour_cma, pool_cma or pool_end_cma}
case "$MODEL" in tour_cma|pool_cma|pool_end_cma) ;; *) echo "MODEL=$MODEL: tour_cma, pool_cma or pool_end_cma" >&2; exit 2 ;; esac
WORK=$(CDPATH= cd -- "$WORK" && pwd)  # absolute before the cd below: a relative WORK would miss its folders
HERE=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
cd "$HERE"
# side, cma_side, random_side, compare, copy_run, check_pool
source ../publish_lib.sh

model_full() { side "$WORK/eval_${MODEL}_full_s$1" "${MODEL}_s$1_full_vs_none_val_unseen.json#a"; }
model_none() { side "$WORK/eval_${MODEL}_none_s$1" "${MODEL}_s$1_full_vs_none_val_unseen.json#b"; }
RANDOM_SIDE=$(random_side "$WORK")
if [ -n "${POOL:-}" ]; then
  check_pool
  read -r -a seeds <<< "$POOL"
  tag=${MODEL}_seeds$(printf '%s' "${seeds[@]}")
  gate_none=(); gate_random=(); vs_cma=()
  for s in "${seeds[@]}"; do
    full=$(model_full "$s"); none=$(model_none "$s"); base=$(cma_side "$WORK" "$s")
    gate_none+=("$full" "$none")
    gate_random+=("$full" "$RANDOM_SIDE")
    vs_cma+=("$full" "$base")
  done
  compare "${tag}_full_vs_none_val_unseen" "${gate_none[@]}" --expect greater
  compare "${tag}_full_vs_random_val_unseen" "${gate_random[@]}" --expect greater
  compare "${tag}_vs_cma_val_unseen" "${vs_cma[@]}" --null --margin 3
  [ "$MODEL" = pool_end_cma ] || compare "${tag}_vs_cma_expect_less_val_unseen" "${vs_cma[@]}" --expect less --paper -2
  exit 0
fi

SEED=${SEED:?the seed to publish (or POOL="0 1 ...")}
copy_run "$WORK/${MODEL}_e2_s$SEED" "${MODEL}_e2_s${SEED}" "$WORK/eval_${MODEL}" "_s$SEED" "${MODEL}_s${SEED}"
FULL=$WORK/eval_${MODEL}_full_s$SEED
compare "${MODEL}_s${SEED}_full_vs_none_val_unseen" "$FULL" "$WORK/eval_${MODEL}_none_s$SEED" --expect greater
compare "${MODEL}_s${SEED}_full_vs_random_val_unseen" "$FULL" "$RANDOM_SIDE" --expect greater
base=$(cma_side "$WORK" "$SEED")
compare "${MODEL}_s${SEED}_vs_cma_val_unseen" "$FULL" "$base" --null --margin 3
[ "$MODEL" = pool_end_cma ] || compare "${MODEL}_s${SEED}_vs_cma_expect_less_val_unseen" "$FULL" "$base" --expect less --paper -2
for c in ${CMA_SEEDS:-0 1 2 3 4}; do
  [ "$c" = "$SEED" ] && continue
  other=$(cma_side "$WORK" "$c")
  compare "${MODEL}_s${SEED}_vs_cma_s${c}_val_unseen" "$FULL" "$other" --null --margin 3
done
