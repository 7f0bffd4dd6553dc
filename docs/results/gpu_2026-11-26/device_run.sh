#!/usr/bin/env bash
# One device call: cuda tests, GPU benches, and the learned-embedding re-measurements
# (MAP-CMA iterative GT 16 epochs, CMA 12 epochs, seed 0) with their val_unseen evaluations.
set -u
T0=$SECONDS
DEV=${DEV:-cuda}; DEADLINE=${DEADLINE:-540}; MEP=${MEP:-16}; CEP=${CEP:-12}
NE_M=${NE_M:-8}; NE_C=${NE_C:-4}; NE_E=${NE_E:-8}; EXTRA=${EXTRA:-}
DATA=${DATA:-$PWD/.dev/data_small}; TINY=${TINY:-$PWD/.dev/data_tiny}
W=${W:-/tmp/w}; O=${OUT:-/tmp/out}; PY=${PY:-python3}; DO_TESTS=${DO_TESTS:-1}
mkdir -p $W/logs $W/eval $O
log() { echo "[$((SECONDS-T0))s] $*" | tee -a $W/logs/driver.log; }
if [ "$DEV" = cuda ]; then
  for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || { log "wheel install failed"; exit 3; }
  export PYTHONPATH=/tmp/site:$PWD
  nvidia-smi > $W/logs/nvidia-smi.txt 2>&1; $PY -m pip list > $W/logs/pip-list.txt 2>&1
else
  export PYTHONPATH=$PWD
fi
log "installed"
IV="$PY -m ivln_ce.cli"
RO=""
if ! $PY -c "
from ivln_ce.sim.gl_context import create_context
ctx = create_context('egl'); print('EGL', ctx.info.get('GL_RENDERER'))" > $W/logs/egl.txt 2>&1; then
  if [ "$DEV" = cuda ] && [ -e /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json ]; then
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  fi
  $PY -c "
from ivln_ce.sim.gl_context import create_context
ctx = create_context('egl'); print('EGL', ctx.info.get('GL_RENDERER'))" >> $W/logs/egl.txt 2>&1 || RO="simulator.renderer=embree"
fi
log "render: $(tail -1 $W/logs/egl.txt) override='$RO'"
TRAIN_COMMON="data.root=$DATA train.device=$DEV seed=0 $RO $EXTRA"
EVAL_COMMON="data.root=$DATA eval.agent=policy eval.deterministic=true eval.device=$DEV eval.num_envs=$NE_E $RO"
(
  OMP_NUM_THREADS=2 $IV train --config configs/embedded/map_cma_iterative_gt.yaml $TRAIN_COMMON train.out_dir=$W/mapcma results_dir=$W/mapcma \
     train.num_envs=$NE_M train.epochs=$MEP > $W/logs/mapcma_train.log 2>&1; echo "rc=$?" >> $W/logs/mapcma_train.log
  log "mapcma train done: $(tail -1 $W/logs/mapcma_train.log)"
  for mode in iterative episodic; do
    OMP_NUM_THREADS=2 $IV eval --config configs/embedded/map_cma_iterative_gt.yaml $EVAL_COMMON eval.split=val_unseen mapping.mode=$mode \
      policy.checkpoint=$W/mapcma/ckpt.$((MEP-1)).pth results_dir=$W/eval/mapcma_val_unseen_$mode > $W/logs/mapcma_eval_$mode.log 2>&1
    log "mapcma eval $mode rc=$?"
  done
) &
(
  OMP_NUM_THREADS=2 $IV train --config configs/embedded/cma.yaml $TRAIN_COMMON train.out_dir=$W/cma results_dir=$W/cma \
     train.num_envs=$NE_C train.epochs=$CEP > $W/logs/cma_train.log 2>&1; echo "rc=$?" >> $W/logs/cma_train.log
  log "cma train done: $(tail -1 $W/logs/cma_train.log)"
  OMP_NUM_THREADS=2 $IV eval --config configs/embedded/cma.yaml $EVAL_COMMON eval.split=val_unseen \
      policy.checkpoint=$W/cma/ckpt.$((CEP-1)).pth results_dir=$W/eval/cma_val_unseen > $W/logs/cma_eval.log 2>&1
  log "cma eval rc=$?"
) &
if [ "$DO_TESTS" = 1 ]; then
  timeout 200 $PY -m pytest -m cuda -ra -q -p no:cacheprovider tests/training/test_trainer_cuda.py tests/rollout/test_policy_eval_cuda.py \
    tests/sim/test_render_cuda.py tests/mapping/test_mapping_cuda.py --junitxml $W/logs/cuda_junit.xml > $W/logs/cuda_tests.log 2>&1
  log "cuda tests rc=$? $(tail -1 $W/logs/cuda_tests.log)"
  timeout 150 $PY scripts/bench_rollout.py --device $DEV --data $TINY --envs 1,2,4 --baseline 1 --json $W/logs/bench_rollout.json > $W/logs/bench_rollout.log 2>&1
  log "bench_rollout rc=$?"
  timeout 100 $PY scripts/bench_train.py --device $DEV --data $TINY > $W/logs/bench_train.log 2>&1
  log "bench_train rc=$?"
fi
while [ $((SECONDS-T0)) -lt $DEADLINE ] && [ -n "$(jobs -rp)" ]; do sleep 5; done
log "deadline or done; running jobs: $(jobs -rp | wc -l)"
pkill -TERM -f "ivln_ce.cli" ; sleep 3; pkill -KILL -f "ivln_ce.cli"
for m in mapcma cma; do
  last=$(ls $W/$m/ckpt.*.pth 2>/dev/null | sed 's/.*ckpt\.\([0-9]*\)\.pth/\1/' | sort -n | tail -1)
  [ -n "$last" ] && $PY .dev/pack_ckpt.py pack $W/$m/ckpt.$last.pth $O/${m}_ckpt$last >> $W/logs/driver.log 2>&1
done
tar -C $W --exclude='*.pth' --exclude='*.pt' --exclude='store*' --exclude='*.bin' -czf $O/logs.tgz logs eval mapcma cma 2>/dev/null
ls -la $O; du -sh $W/* ; cat $W/logs/driver.log
