#!/usr/bin/env bash
# One recipe on a lent GPU machine (15 minutes of device time, at most 10 minutes a call), in calls on
# the same warm machine (it is given back after 30 s idle: make each call right after the last).
#   PHASE=1: install the carried wheels and EGL loaders, start the training under setsid (it outlives
#            the call), watch it until DEADLINE seconds.
#   PHASE=2: watch until the training ends (or DEADLINE), evaluate its last checkpoint on $EVAL_SPLIT
#            in each of $EVAL_MODES on cuda until EVAL_AT seconds, pack the checkpoint and results into $OUT.
# Run from the repository root with .whl/ (wheels), .gl/ (EGL loader .debs), .dev/data_small and
# .dev/pack_ckpt.py carried. The 2026-11-26 H100 session ran:
#   PHASE=1 DEADLINE=555 bash device_run.sh ; PHASE=2 DEADLINE=265 bash device_run.sh ; (then one eval by hand)
# A MAP-CMA recipe trains in about 622 s on an H100 and an evaluation of val_unseen takes about 110 s.
set -u
T0=$SECONDS; PHASE=${PHASE:-1}; DEADLINE=${DEADLINE:-560}; EVAL_AT=${EVAL_AT:-0}
RECIPE=${RECIPE:-configs/embedded/map_cma_iterative_gt.yaml}; OVR=${OVR:-}; SEED=${SEED:-0}
EVAL_SPLIT=${EVAL_SPLIT:-val_unseen}; EVAL_MODES=${EVAL_MODES:-iterative}
W=/tmp/w; O=${OUT:-/tmp/out}; PY=python3; DATA=$PWD/.dev/data_small
mkdir -p $W/logs $W/eval $O
log() { echo "[p$PHASE $((SECONDS-T0))s] $*" | tee -a $W/logs/driver.log; }
if [ "$PHASE" = 1 ]; then
  for f in .gl/*.deb; do dpkg -x $f / ; done; ldconfig
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || { log "wheel install failed"; exit 3; }
  nvidia-smi > $W/logs/nvidia-smi.txt 2>&1
fi
export PYTHONPATH=/tmp/site:$PWD
[ -e /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json ] && export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
RO=""
$PY -c "
from ivln_ce.sim.gl_context import create_context
ctx = create_context('egl'); print('EGL', ctx.info.get('GL_RENDERER'))" > $W/logs/egl.txt 2>&1 || RO="simulator.renderer=embree"
log "render: $(tail -1 $W/logs/egl.txt) override='$RO'"
IV="$PY -m ivln_ce.cli"
if [ "$PHASE" = 1 ]; then
  setsid nohup bash -c "OMP_NUM_THREADS=2 $IV train --config $RECIPE data.root=$DATA train.device=cuda seed=$SEED train.num_envs=14 $OVR $RO train.out_dir=$W/run results_dir=$W/run > $W/logs/train.log 2>&1; echo rc=\$? >> $W/logs/train.log" > /dev/null 2>&1 &
  log "training started: $RECIPE seed=$SEED $OVR"
fi
done_train() { grep -q "^rc=" $W/logs/train.log 2>/dev/null; }
last_ckpt() { ls $W/run/ckpt.*.pth 2>/dev/null | sed 's/.*ckpt\.\([0-9]*\)\.pth/\1/' | sort -n | tail -1; }
while ! done_train && [ $((SECONDS-T0)) -lt $DEADLINE ]; do
  sleep 5
  [ $(((SECONDS-T0) % 60)) -lt 5 ] && log "checkpoints so far: $(last_ckpt)"
done
log "train: $(tail -c 300 $W/logs/train.log | tr '\r' '\n' | tail -2)"
if done_train && [ "$EVAL_AT" -gt 0 ]; then
  C=$(last_ckpt)
  for mode in $EVAL_MODES; do
    [ $((SECONDS-T0)) -lt $EVAL_AT ] || break
    OMP_NUM_THREADS=1 timeout $((EVAL_AT-(SECONDS-T0))) $IV eval --config $RECIPE data.root=$DATA eval.agent=policy eval.deterministic=true \
      eval.device=cuda eval.num_envs=15 env.oracle_phases=true eval.split=$EVAL_SPLIT mapping.mode=$mode $RO \
      policy.checkpoint=$W/run/ckpt.$C.pth results_dir=$W/eval/${EVAL_SPLIT}_$mode > $W/logs/eval_${EVAL_SPLIT}_$mode.log 2>&1
    log "eval $EVAL_SPLIT $mode rc=$?: $(tail -c 2000 $W/logs/eval_${EVAL_SPLIT}_$mode.log | tr '\r' '\n' | grep t-nDTW | tail -1)"
  done
fi
if done_train || [ "$PHASE" = 2 ]; then
  C=$(last_ckpt)
  [ -n "$C" ] && $PY .dev/pack_ckpt.py pack $W/run/ckpt.$C.pth $O/ckpt$C >> $W/logs/driver.log 2>&1
fi
tar -C $W --exclude='*.pth' --exclude='*.pt' --exclude='store' -czf $O/logs.tgz logs eval run 2>/dev/null
ls -la $O; cat $W/logs/driver.log
