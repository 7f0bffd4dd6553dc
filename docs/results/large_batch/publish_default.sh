#!/usr/bin/env bash
# Publish what run_default.sh produced for ARM and SEED into this folder: the training summary and
# config, the two evaluations' summaries, and the comparisons: against the batch-8 CMA run of the same
# seed (`--null --margin 3`: does batch 64 reach batch 8?), and the arm's own gate (full instruction -
# none and - random agent, `--expect greater`). The batch-8 side is WORK/eval_full_sS when present,
# else the committed ../default_cma report that kept its per-tour values (`REPORT.json#a`); the random
# agent likewise (../default_cma/full_vs_random_val_unseen.json#b).
# Usage: WORK=/path/of/run_default.sh SEED=4 [ARM=b64] bash docs/results/large_batch/publish_default.sh
set -euo pipefail
WORK=${WORK:?the folder of run_default.sh}
SEED=${SEED:?the seed to publish}
ARM=${ARM:-b64}
WORK=$(cd "$WORK" && pwd)
cd "$(dirname "$0")"
# side FOLDER REPORT#x: the folder when it holds a val_unseen evaluation, else the committed report side
side() {
  if ls "$1"/*_stats_*val_unseen.json >/dev/null 2>&1; then echo "$1"; return; fi
  [ -f "${2%#*}" ] || { echo "neither $1 nor ${2%#*} exists" >&2; exit 1; }
  echo "$2"
}
compare() {
  local out=$1; shift
  ivln-ce compare "$@" --split val_unseen --tndtw tndtw_paper --out "$out.json" > "$out.txt.tmp" \
    || { rm -f "$out.txt.tmp"; exit 1; }
  mv "$out.txt.tmp" "$out.txt"
  echo "wrote $out.json, $out.txt"
}
prefix=$([ "$SEED" = 0 ] && echo "" || echo "s${SEED}_")
B8=$(side "$WORK/eval_full$([ "$SEED" = 0 ] || echo "_s$SEED")" "../default_cma/${prefix}full_vs_none_val_unseen.json#a")
RANDOM_SIDE=$(side "$WORK/eval_random" "../default_cma/full_vs_random_val_unseen.json#b")
RUN=$WORK/cma_e2_${ARM}_s$SEED
tag=default_${ARM}_s$SEED
for f in train_summary.json config.json; do
  [ -f "$RUN/$f" ] || { echo "$RUN/$f: missing; has run_default.sh finished training?" >&2; exit 1; }
done
cp "$RUN/train_summary.json" "${tag}_train_summary.json"
cp "$RUN/config.json" "${tag}_train_config.json"
for ins in full none; do
  stats=$(ls "$WORK/eval_${ARM}_${ins}_s$SEED"/*_stats_*val_unseen.json | grep -v '_all_stats_')
  [ "$(echo "$stats" | wc -l)" = 1 ] || { echo "eval_${ARM}_${ins}_s$SEED: expected one stats file, found: $stats" >&2; exit 1; }
  cp "$stats" "${tag}_${ins}_eval_val_unseen_stats.json"
done
FULL=$WORK/eval_${ARM}_full_s$SEED
compare "${tag}_vs_b8_val_unseen" "$FULL" "$B8" --null --margin 3
compare "${tag}_full_vs_none_val_unseen" "$FULL" "$WORK/eval_${ARM}_none_s$SEED" --expect greater
compare "${tag}_full_vs_random_val_unseen" "$FULL" "$RANDOM_SIDE" --expect greater
