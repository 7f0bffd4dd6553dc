#!/usr/bin/env bash
# Batch 8 against the large-batch overlay (CMA recipe by default) on the `small` benchmark:
# teacher-forced validation accuracy on val_seen after every epoch (train.val_split) and
# t-nDTW on val_unseen, at equal epochs. Resumable: a finished step is skipped, a killed
# training resumes. The arms of one seed share its frozen encoders and so one teacher-forcing
# store (train.store_cache); another seed collects its own (add policy.frozen_encoder_seed=0 to
# EXTRA for one store across seeds: those encoders differ from seed 0's default draw). Seed 0
# writes WORK/ARM and WORK/eval_ARM, seed S > 0 WORK/ARM_sS and WORK/eval_ARM_sS.
# Arm b64steps is b64 with 8x the recipe's epochs (about as many optimizer steps as b8); each arm is
# evaluated at its own last checkpoint.
# Usage: [SEED=S] [ARMS="b8 b64"] WORK=/path/outside/the/repo bash docs/results/large_batch/run.sh
# On a GPU: RECIPE=configs/embedded/map_cma_iterative_gt.yaml DEVICE=cuda ARMS=b64 \
#   EXTRA="train.num_envs=14 eval.num_envs=14 train.loader_workers=3" WORK=... bash .../run.sh
set -euo pipefail
WORK=${WORK:?a folder outside the work tree}
RECIPE=${RECIPE:-configs/embedded/cma.yaml}
DEVICE=${DEVICE:-cpu}
SEED=${SEED:-0}
ARMS=${ARMS:-"b8 b64 b128"}
read -r -a more <<< "${EXTRA:-}"
DATA=$WORK/synthetic_small
[ -f "$DATA/manifest.json" ] || ivln-ce data synth --preset small --out "$DATA"
read -r epochs iterations < <(python -c "import sys; from ivln_ce.config import load_config; c = load_config(sys.argv[1], []); print(int(c.train.epochs), int(c.train.iterations))" "$RECIPE")
for arm in $ARMS; do
  arm_epochs=$epochs
  case $arm in
    b8) extra=() ;;
    b64) extra=(--config configs/profiles/large_batch.yaml) ;;
    b64steps) arm_epochs=$((epochs * 8)); extra=(--config configs/profiles/large_batch.yaml train.epochs=$arm_epochs) ;;
    b128) extra=(--config configs/profiles/large_batch.yaml train.batch_size=128 train.lr_warmup_steps=6) ;;
    b64lin) extra=(--config configs/profiles/large_batch.yaml train.lr_rule=linear) ;;
    *) echo "unknown arm $arm" >&2; exit 2 ;;
  esac
  last=$((arm_epochs * iterations - 1))
  out=$WORK/$arm; [ "$SEED" = 0 ] || out=$WORK/${arm}_s$SEED
  [ -f "$out/train_summary.json" ] || ivln-ce train --config "$RECIPE" "${extra[@]}" data.root="$DATA" seed="$SEED" \
      train.device="$DEVICE" train.val_split=val_seen train.store_cache="$WORK/tf_cache" \
      train.out_dir="$out" results_dir="$out" "${more[@]}"
  ev=$WORK/eval_$arm; [ "$SEED" = 0 ] || ev=$WORK/eval_${arm}_s$SEED
  ls "$ev"/iterative_stats_ckpt_*_val_unseen.json >/dev/null 2>&1 || ivln-ce eval --config "$RECIPE" data.root="$DATA" eval.agent=policy \
      eval.deterministic=true env.oracle_phases=true eval.split=val_unseen eval.device="$DEVICE" \
      policy.checkpoint="$out/ckpt.$last.pth" results_dir="$ev" "${more[@]}"
done
