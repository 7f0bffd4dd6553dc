#!/usr/bin/env bash
# Batch 64 against batch 8 on the R2R-sized `default` benchmark (60 houses, 7,200 train episodes),
# CMA recipe, at equal epochs (2). The batch-8 arm is docs/results/default_cma/run.sh's run of the
# same SEED in the same WORK: same data, same frozen encoders (drawn from the seed), so the same
# teacher-forcing store (train.store_cache reuses it after checking it), and the same 11 tours.
# This script runs the batch-64 arm through that same script (NAME, TRAIN_EXTRA):
# configs/profiles/large_batch.yaml (sqrt rule, lr 2.83e-3, 12-step warm-up), 226 optimizer steps
# instead of 1,800, then val_unseen with and without the instruction, into WORK/cma_e2_ARM_sS and
# WORK/eval_ARM_{full,none}_sS (no _sS for seed 0). ARM=b64lin uses the linear rule (8e-3) instead.
# ARM=b64e16 is the sqrt arm at 16 epochs (1,808 optimizer steps, about batch 8's 1,800 in 2 epochs;
# eight times the data); it evaluates ckpt.15.pth.
# Resumable: a finished step is skipped.
# STAGE=eval with AT_EPOCH=E evaluates the checkpoint after epoch E (< the arm's epochs: 2, or 16 for b64e16)
# instead of the last (passed on to default_cma/run.sh).
# Usage: WORK=/path/outside/the/repo SEED=S [ARM=b64] [STAGE=train|eval] [AT_EPOCH=E] bash docs/results/large_batch/run_default.sh
# Then: WORK=... SEED=S [ARM=b64] bash docs/results/large_batch/publish_default.sh
set -euo pipefail
: "${WORK:?a folder outside the work tree}" "${SEED:?the training seed of a batch-8 default_cma run in WORK}"
ARM=${ARM:-b64}
case $ARM in
  b64) extra="--config configs/profiles/large_batch.yaml"; export EPOCHS=2 ;;
  b64lin) extra="--config configs/profiles/large_batch.yaml train.lr_rule=linear"; export EPOCHS=2 ;;
  b64e16) extra="--config configs/profiles/large_batch.yaml"; export EPOCHS=16 ;;
  *) echo "unknown arm $ARM" >&2; exit 2 ;;
esac
[ -f "$WORK/synthetic_default/manifest.json" ] || { echo "no $WORK/synthetic_default: run docs/results/default_cma/run.sh first" >&2; exit 2; }
NAME=$ARM TRAIN_EXTRA=$extra exec bash "$(dirname "$0")/../default_cma/run.sh"
