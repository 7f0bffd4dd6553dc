# Shared by the results folders' publish scripts (sourced, not run): finding a comparison's sides,
# writing `ivln-ce compare` reports atomically, and copying one run's summaries into the folder.

# side FOLDER REPORT#x: the folder when it holds a val_unseen evaluation, else the committed report side
# (which must exist). Its failure ends only the $(...) it runs in: callers assign each side to a variable
# first, so that set -e sees it (an assignment's status is its substitution's).
side() {
  if ls "$1"/*_stats_*val_unseen.json >/dev/null 2>&1; then echo "$1"; return; fi
  [ -f "${2%#*}" ] || { echo "neither $1 nor ${2%#*} exists: run the evaluation first" >&2; exit 1; }
  echo "$2"
}

# The sides that ../default_cma provides, for a script one folder below docs/results (the cwd); their
# committed reports are read from CMA_REPORTS (default ../default_cma/; default_cma's own script sets it empty):
# cma_side WORK S: CMA seed S at batch 8 (WORK/eval_full, _sS for S > 0, or its committed report);
# cma_none_side WORK S: the same seed without its instruction (WORK/eval_none, _sS for S > 0);
# random_side WORK: the random agent on the same tours.
cma_side() {
  side "$1/eval_full$([ "$2" = 0 ] || echo "_s$2")" "${CMA_REPORTS-../default_cma/}$([ "$2" = 0 ] || echo "s$2_")full_vs_none_val_unseen.json#a"
}
cma_none_side() {
  side "$1/eval_none$([ "$2" = 0 ] || echo "_s$2")" "${CMA_REPORTS-../default_cma/}$([ "$2" = 0 ] || echo "s$2_")full_vs_none_val_unseen.json#b"
}
random_side() { side "$1/eval_random" "${CMA_REPORTS-../default_cma/}full_vs_random_val_unseen.json#b"; }

# check_pool: POOL (with SEED unset) names at least two seeds, single digits, each once: the pooled reports
# names concatenate them (seeds01235)
check_pool() {
  local s seeds
  [ -z "${SEED:-}" ] || { echo "set SEED or POOL, not both" >&2; exit 2; }
  read -r -a seeds <<< "$POOL"
  [ "${#seeds[@]}" -ge 2 ] || { echo "POOL names at least two seeds" >&2; exit 2; }
  for s in "${seeds[@]}"; do
    [[ "$s" =~ ^[0-9]$ ]] || { echo "POOL: $s is not a seed from 0 to 9" >&2; exit 2; }
  done
  [ "$(printf '%s\n' "${seeds[@]}" | sort -u | wc -l)" = "${#seeds[@]}" ] || { echo "POOL names a seed twice: $POOL" >&2; exit 2; }
}

# compare OUT ARGS...: the JSON report OUT.json and the printed table OUT.txt
compare() {
  local out=$1; shift
  ivln-ce compare "$@" --split val_unseen --tndtw tndtw_paper --out "$out.json" > "$out.txt.tmp" \
    || { rm -f "$out.txt.tmp"; exit 1; }
  mv "$out.txt.tmp" "$out.txt"
  echo "wrote $out.json, $out.txt"
}

# copy_stats EVAL DEST: EVAL's one val_unseen summary (`*_stats_*`, not the per-episode `*_all_stats_*`) as DEST
copy_stats() {
  local stats
  stats=$(ls "$1"/*_stats_*val_unseen.json 2>/dev/null | grep -v '_all_stats_' || true)
  [ -n "$stats" ] && [ "$(echo "$stats" | wc -l)" = 1 ] || { echo "$1: expected one val_unseen stats file, found: $stats" >&2; exit 1; }
  cp "$stats" "$2"
}

# copy_run RUN TRAIN_TAG EVAL_PREFIX EVAL_SUFFIX STATS_TAG: RUN's train_summary.json and config.json as
# TRAIN_TAG_train_{summary,config}.json, and the val_unseen summary of EVAL_PREFIX_{full,none}EVAL_SUFFIX
# as STATS_TAG_{full,none}_eval_val_unseen_stats.json
copy_run() {
  local run=$1 train_tag=$2 eval_prefix=$3 eval_suffix=$4 stats_tag=$5 f ins
  for f in train_summary.json config.json; do
    [ -f "$run/$f" ] || { echo "$run/$f: missing; has the training finished?" >&2; exit 1; }
  done
  cp "$run/train_summary.json" "${train_tag}_train_summary.json"
  cp "$run/config.json" "${train_tag}_train_config.json"
  for ins in full none; do
    copy_stats "${eval_prefix}_${ins}${eval_suffix}" "${stats_tag}_${ins}_eval_val_unseen_stats.json"
  done
}
