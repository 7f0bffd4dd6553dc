"""``scripts/gpu_session.sh`` and ``scripts/gpu_wheels.sh`` on a machine without a GPU: the
``--dry-run`` plan lists every step with its command and the output folder, and the commands use
the real flags of the scripts and the CLI they call; the step mechanics (done-markers, a stopped
or failed step, repeating one step) with a stand-in interpreter; shellcheck where installed."""

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys

import pytest

from tests.conftest import REPO

SESSION = REPO / "scripts" / "gpu_session.sh"
WHEELS = REPO / "scripts" / "gpu_wheels.sh"
STEPS = ["install", "cuda-tests", "bench-rollout", "bench-train", "reproduce"]


def _run(*args, env=None, timeout=120):
    return subprocess.run(["bash", str(SESSION), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=REPO)


def _plan(text):
    """step name -> its command, from the plan."""
    steps = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"step (\S+) \[(.*)\]:$", line)
        if m:
            steps[m.group(1)] = (m.group(2), lines[i + 1].strip())
    return steps


def test_dry_run_prints_every_step_with_its_command_and_the_out_folder(tmp_path):
    out, wheels = tmp_path / "session out", tmp_path / "wh"
    r = _run("--dry-run", "--out", out, "--wheels", wheels, "--python", "/opt/py312/bin/python3")
    assert r.returncode == 0, r.stderr
    assert f"output folder: {out}" in r.stdout and f"wheels: {wheels}" in r.stdout
    assert "timeout --kill-after=60 1500" in r.stdout
    steps = _plan(r.stdout)
    assert list(steps) == STEPS and all(state == "to run" for state, _ in steps.values())
    py = "/opt/py312/bin/python3"
    install = steps["install"][1]
    assert f"{py} -m pip install --no-index --find-links {shlex.quote(str(wheels))} -e '.[dev]'" in install
    assert "torch.cuda.is_available()" in install  # the preinstalled CUDA torch is checked, never installed
    assert steps["cuda-tests"][1].startswith(f"{py} -m pytest -m cuda ")
    words = {k: shlex.split(c) for k, (_, c) in steps.items()}  # the commands as the shell reads them (spaces escaped)
    assert words["bench-rollout"] == [py, "scripts/bench_rollout.py", "--device", "cuda", "--data", str(out / "data" / "synthetic_tiny"),
                                      "--json", str(out / "bench-rollout" / "result.json")]
    assert words["bench-train"] == [py, "scripts/bench_train.py", "--device", "cuda", "--data", str(out / "data" / "synthetic_tiny")]
    assert words["reproduce"] == [py, "-m", "ivln_ce.cli", "reproduce", "all", "--scale", "default", "--seeds", "3", "--device", "cuda",
                                  "--out", str(out / "reproduce"), "--data", str(out / "data" / "synthetic_small")]
    assert words["cuda-tests"][-2:] == ["--junitxml", str(out / "cuda-tests" / "junit.xml")]
    assert not out.exists()  # a dry run makes nothing
    one = _plan(_run("--dry-run", "--out", out, "--step", "bench-train").stdout)
    assert one["bench-train"][0].startswith("selected") and one["install"][0] == "not selected"


def test_the_planned_commands_use_real_flags(tmp_path):
    """The reproduce command parses with the CLI's own parser; every flag given to a benchmark
    script is one of its argparse options."""
    from ivln_ce.cli import build_parser

    steps = _plan(_run("--dry-run", "--out", tmp_path / "o").stdout)
    words = shlex.split(steps["reproduce"][1])
    args = build_parser().parse_args(words[words.index("reproduce"):])
    assert (args.table, args.scale, args.seeds, args.device) == ("all", "default", 3, "cuda")
    for step, script in (("bench-rollout", "bench_rollout.py"), ("bench-train", "bench_train.py")):
        flags = [w for w in shlex.split(steps[step][1]) if w.startswith("--")]
        source = (REPO / "scripts" / script).read_text()
        for flag in flags:
            assert f'add_argument("{flag}"' in source, (script, flag)


def _fake_python(tmp_path):
    """A stand-in interpreter: logs its arguments, sleeps FAKE_SLEEP, exits FAKE_RC."""
    f = tmp_path / "python"
    f.write_text('#!/usr/bin/env bash\necho "fake python $*" >> "$FAKE_LOG"\n'
                 '[[ -n "${FAKE_SLEEP:-}" ]] && sleep "$FAKE_SLEEP"\nexit "${FAKE_RC:-0}"\n')
    f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return f


def test_steps_record_done_markers_and_a_stopped_or_failed_step_is_repeated(tmp_path):
    py, out, wheels = _fake_python(tmp_path), tmp_path / "out", tmp_path / "wheels"
    calls = tmp_path / "calls.log"
    env = {"FAKE_LOG": str(calls)}
    r = _run("--out", out, "--wheels", wheels, "--python", py, env=env)
    assert r.returncode == 2 and "no wheels in" in r.stderr and "gpu_wheels.sh" in r.stderr
    wheels.mkdir()
    (wheels / "x-1.0-py3-none-any.whl").write_bytes(b"")
    # a step that fails: no marker, its exit status recorded, the run says so
    r = _run("--out", out, "--wheels", wheels, "--python", py, "--step", "bench-train", env={**env, "FAKE_RC": "3"})
    assert r.returncode == 1 and "not done: bench-train" in r.stderr
    assert (out / "bench-train" / "rc").read_text().strip() == "3" and not (out / "done" / "bench-train").exists()
    # a step stopped by its timeout: exit status 124 and the line to go on
    r = _run("--out", out, "--wheels", wheels, "--python", py, "--step", "reproduce", "--step-timeout", "1",
             env={**env, "FAKE_SLEEP": "20"})
    assert r.returncode == 1 and "run 'bash scripts/gpu_session.sh --step reproduce' again" in r.stdout
    assert (out / "reproduce" / "rc").read_text().strip() == "124"
    # every step not done runs, in order, and leaves its marker
    calls.write_text("")
    r = _run("--out", out, "--wheels", wheels, "--python", py, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.name for p in (out / "done").iterdir()) == sorted(STEPS)
    log = calls.read_text()
    assert log.index("pip install --no-index") < log.index("pytest -m cuda") < log.index("bench_rollout.py") \
        < log.index("bench_train.py") < log.index("ivln_ce.cli reproduce all")
    assert (out / "install" / "machine.txt").exists()
    # a second run skips them all; --step repeats one
    calls.write_text("")
    r = _run("--out", out, "--wheels", wheels, "--python", py, env=env)
    assert r.returncode == 0 and calls.read_text() == "" and r.stdout.count("skipped") == len(STEPS)
    r = _run("--out", out, "--wheels", wheels, "--python", py, "--step", "cuda-tests", env=env)
    assert r.returncode == 0 and "pytest -m cuda" in calls.read_text() and "bench_" not in calls.read_text()
    assert (out / "cuda-tests" / "log.txt").read_text().count("== step cuda-tests done") == 2


def test_bad_arguments_exit_2():
    r = _run("--step", "nope", "--dry-run")
    assert r.returncode == 2 and "unknown step 'nope'" in r.stderr and "install cuda-tests" in r.stderr
    r = _run("--step-timeout", "0", "--dry-run")
    assert r.returncode == 2 and "--step-timeout" in r.stderr
    r = _run("--frobnicate")
    assert r.returncode == 2 and "unknown argument: --frobnicate" in r.stderr


def test_gpu_wheels_dry_run_lists_the_dependencies_without_torch():
    r = subprocess.run(["bash", str(WHEELS), "--dry-run", "--python-version", "3.12"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHON": sys.executable}, cwd=REPO)
    assert r.returncode == 0, r.stderr
    reqs = [line.strip() for line in r.stdout.splitlines() if line.startswith("  ") and not line.startswith("  " + sys.executable)]
    names = {re.split(r"[<>=!~;\[ ]", x)[0].lower() for x in reqs if not x.startswith(("python", "/"))}
    assert "torch" not in names
    assert {"numpy", "scipy", "numba", "moderngl", "pytest", "setuptools", "wheel", "scikit-fmm"} <= names
    assert "--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --platform manylinux2014_x86_64" in r.stdout


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed (apt-get install shellcheck)")
def test_the_scripts_are_shellcheck_clean():
    r = subprocess.run(["shellcheck", str(SESSION), str(WHEELS)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout
