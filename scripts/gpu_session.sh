#!/usr/bin/env bash
# One session on a fresh, offline GPU machine (Python 3.12 with a CUDA build of PyTorch already
# installed, no package registry): install the project from a folder of wheels, run the CUDA
# tests, the rollout and training benchmarks on the GPU, and the reproduction of the paper's
# findings at the default scale, everything into one output folder.
#
# Why steps: a lent GPU machine is held for a limited time (and one command is limited too), so
# each step runs under `timeout` (25 minutes by default) and records a done-marker when it
# succeeds; running the script again runs the steps not done yet, and `--step NAME` runs (or
# repeats) one step. Every step is repeatable: the install is idempotent, the tests and
# benchmarks overwrite their logs, and `ivln-ce reproduce` resumes where it was stopped, so
# the long `reproduce` step is simply repeated until its marker appears.
#
#   bash scripts/gpu_session.sh [--wheels DIR] [--out DIR] [--step NAME] [--python PY]
#                               [--step-timeout SECONDS] [--dry-run]
#
# The wheels come from scripts/gpu_wheels.sh, run where a registry is reachable.

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS="wheels"
OUT="gpu_session_out"
STEP=""
DRY_RUN=0
PYTHON="${PYTHON:-python3}"
STEP_TIMEOUT=1500
STEPS=(install cuda-tests bench-rollout bench-train reproduce)

usage() {
    cat <<EOF
usage: bash scripts/gpu_session.sh [--wheels DIR] [--out DIR] [--step NAME] [--python PY] [--step-timeout S] [--dry-run]

  --wheels DIR        the project's dependencies as wheels, from scripts/gpu_wheels.sh (default wheels/)
  --out DIR           every log, result and done-marker (default gpu_session_out/)
  --step NAME         run (or repeat) one step: ${STEPS[*]}
                      (default: every step without a done-marker, in that order)
  --python PY         the interpreter with the CUDA build of torch (default \$PYTHON or python3)
  --step-timeout S    seconds a step may run (default 1500: 25 minutes); a stopped step is
                      repeated by the next run (the reproduction resumes)
  --dry-run           print the plan (steps, commands, output folder) and run nothing
EOF
}

die() {
    echo "gpu_session.sh: error: $*" >&2
    exit 2
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --wheels) [[ $# -ge 2 ]] || die "--wheels needs a folder"; WHEELS="$2"; shift 2 ;;
        --out) [[ $# -ge 2 ]] || die "--out needs a folder"; OUT="$2"; shift 2 ;;
        --step) [[ $# -ge 2 ]] || die "--step needs a name (${STEPS[*]})"; STEP="$2"; shift 2 ;;
        --python) [[ $# -ge 2 ]] || die "--python needs an interpreter"; PYTHON="$2"; shift 2 ;;
        --step-timeout) [[ $# -ge 2 ]] || die "--step-timeout needs seconds"; STEP_TIMEOUT="$2"; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done

[[ "$STEP_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "--step-timeout must be a positive number of seconds, got '$STEP_TIMEOUT'"
if [[ -n "$STEP" ]]; then
    known=0
    for s in "${STEPS[@]}"; do [[ "$s" == "$STEP" ]] && known=1; done
    [[ $known -eq 1 ]] || die "unknown step '$STEP'; the steps are: ${STEPS[*]}"
fi

cd "$REPO"
# absolute folders: the commands run from the repository root whatever the caller's folder
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
case "$WHEELS" in /*) ;; *) WHEELS="$PWD/$WHEELS" ;; esac
DATA="$OUT/data"

q() { printf '%q' "$1"; }

# The command of each step (one line of shell, run from the repository root).
step_command() {
    case "$1" in
        install)
            # --no-index: nothing but the wheels folder, so the preinstalled CUDA torch (which
            # satisfies torch>=2.2) can be neither upgraded nor replaced
            echo "$(q "$PYTHON") -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else \"torch \" + torch.__version__ + \" sees no CUDA device\")'" \
                "&& $(q "$PYTHON") -m pip install --no-index --find-links $(q "$WHEELS") -e '.[dev]'" \
                "&& { $(q "$PYTHON") -m pip check || echo 'pip check reports the problems above (not fatal)'; }" \
                "&& { nvidia-smi || true; $(q "$PYTHON") -m pip freeze; } > $(q "$OUT/install/machine.txt")" ;;
        cuda-tests)
            echo "$(q "$PYTHON") -m pytest -m cuda -ra -q tests --junitxml $(q "$OUT/cuda-tests/junit.xml")" ;;
        bench-rollout)
            echo "$(q "$PYTHON") scripts/bench_rollout.py --device cuda --data $(q "$DATA/synthetic_tiny") --json $(q "$OUT/bench-rollout/result.json")" ;;
        bench-train)
            echo "$(q "$PYTHON") scripts/bench_train.py --device cuda --data $(q "$DATA/synthetic_tiny")" ;;
        reproduce)
            echo "$(q "$PYTHON") -m ivln_ce.cli reproduce all --scale default --seeds 3 --device cuda --out $(q "$OUT/reproduce") --data $(q "$DATA/synthetic_small")" ;;
        *) die "no command for step '$1'" ;;
    esac
}

is_done() { [[ -f "$OUT/done/$1" ]]; }

plan() {
    echo "gpu session plan (nothing is run with --dry-run)"
    echo "repository: $REPO"
    echo "output folder: $OUT"
    echo "wheels: $WHEELS"
    echo "python: $PYTHON"
    echo "each step: timeout --kill-after=60 $STEP_TIMEOUT; log in OUT/<step>/log.txt, exit status in OUT/<step>/rc, done-marker OUT/done/<step>"
    for s in "${STEPS[@]}"; do
        local state="to run"
        is_done "$s" && state="done (marker $OUT/done/$s)"
        [[ -n "$STEP" && "$s" != "$STEP" ]] && state="not selected"
        [[ -n "$STEP" && "$s" == "$STEP" ]] && state="selected (runs even when done)"
        echo "step $s [$state]:"
        echo "  $(step_command "$s")"
    done
}

run_step() {
    local s="$1" cmd rc
    cmd="$(step_command "$s")"
    mkdir -p "$OUT/$s" "$OUT/done"
    rm -f "$OUT/done/$s"
    {
        echo "== $(date -u '+%Y-%m-%dT%H:%M:%SZ') step $s (timeout ${STEP_TIMEOUT}s)"
        echo "\$ $cmd"
    } | tee -a "$OUT/$s/log.txt"
    set +e
    timeout --kill-after=60 "$STEP_TIMEOUT" bash -o pipefail -c "$cmd" 2>&1 | tee -a "$OUT/$s/log.txt"
    rc=${PIPESTATUS[0]}
    set -e
    echo "$rc" > "$OUT/$s/rc"
    if [[ $rc -eq 0 ]]; then
        date -u '+%Y-%m-%dT%H:%M:%SZ' > "$OUT/done/$s"
        echo "== step $s done" | tee -a "$OUT/$s/log.txt"
    elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
        echo "== step $s stopped after ${STEP_TIMEOUT}s: run 'bash scripts/gpu_session.sh --step $s' again to go on" | tee -a "$OUT/$s/log.txt"
    else
        echo "== step $s failed with exit status $rc (log: $OUT/$s/log.txt)" | tee -a "$OUT/$s/log.txt"
    fi
    return "$rc"
}

if [[ $DRY_RUN -eq 1 ]]; then
    plan
    exit 0
fi

if [[ "$STEP" == "install" || ( -z "$STEP" ) ]] && ! is_done install; then
    compgen -G "$WHEELS/*.whl" > /dev/null \
        || die "no wheels in $WHEELS: make them with 'bash scripts/gpu_wheels.sh --dest wheels' where a registry is reachable"
fi
mkdir -p "$OUT"
failed=()
for s in "${STEPS[@]}"; do
    if [[ -n "$STEP" ]]; then
        [[ "$s" == "$STEP" ]] || continue
    elif is_done "$s"; then
        echo "== step $s: done earlier ($(cat "$OUT/done/$s")); skipped"
        continue
    fi
    if ! run_step "$s"; then
        failed+=("$s")
        [[ "$s" == "install" ]] && break # nothing else can run without the install
    fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "gpu_session.sh: not done: ${failed[*]} (logs under $OUT)" >&2
    exit 1
fi
echo "gpu_session.sh: every selected step is done; results under $OUT"
