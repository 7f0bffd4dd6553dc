#!/usr/bin/env bash
# Session 11: two MAP-CMA recipes (episodic_gt = A, known_gt = B), seed 0, cuda, staggered so A's
# collection has the CPUs first. PHASE=1: install, start A, start B at B_AT s, watch until DEADLINE.
# PHASE=2: watch, pack each finished run's last checkpoint into $OUT, stop at DEADLINE.
set -u
T0=$SECONDS; PHASE=${PHASE:-1}; DEADLINE=${DEADLINE:-560}; B_AT=${B_AT:-95}
W=/tmp/w; O=${OUT:-/tmp/out}; PY=python3; DATA=$PWD/.dev/data_small
mkdir -p $W/logs $O
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
start() {  # name recipe num_envs
  setsid nohup bash -c "OMP_NUM_THREADS=2 $PY -m ivln_ce.cli train --config configs/embedded/$2.yaml data.root=$DATA train.device=cuda seed=0 train.num_envs=$3 train.loader_workers=3 $RO train.out_dir=$W/$1 results_dir=$W/$1 > $W/logs/train_$1.log 2>&1; echo rc=\$? >> $W/logs/train_$1.log" > /dev/null 2>&1 &
  log "started $1: $2 num_envs=$3"
}
done_run() { grep -q "^rc=" $W/logs/train_$1.log 2>/dev/null; }
last_ckpt() { ls $W/$1/ckpt.*.pth 2>/dev/null | sed 's/.*ckpt\.\([0-9]*\)\.pth/\1/' | sort -n | tail -1; }
pack() { [ -f $O/$1.packed ] && return; done_run $1 || return; C=$(last_ckpt $1); [ -n "$C" ] || return
  $PY .dev/pack_ckpt.py pack $W/$1/ckpt.$C.pth $O/${1}_ckpt$C >> $W/logs/driver.log 2>&1 && touch $O/$1.packed; log "packed $1 ckpt.$C: $(tail -c 200 $W/logs/train_$1.log | tr '\r' '\n' | tail -1)"; }
if [ "$PHASE" = 1 ]; then
  start A map_cma_episodic_gt 14
  while [ $((SECONDS-T0)) -lt $B_AT ]; do sleep 2; done
  start B map_cma_known_gt 12
fi
while ! { done_run A && done_run B; } && [ $((SECONDS-T0)) -lt $DEADLINE ]; do
  sleep 5; pack A
  [ $(((SECONDS-T0) % 60)) -lt 5 ] && log "ckpts A=$(last_ckpt A) B=$(last_ckpt B)"
done
pack A; pack B
rm -f $O/*.packed
tar -C $W --exclude='*.pth' --exclude='*.pt' --exclude='store' --exclude='replay' -czf $O/logs.tgz logs A B 2>/dev/null
ls -la $O; cat $W/logs/driver.log
