import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable

import pytest


def _pin_xdist_worker() -> None:
    """Under pytest-xdist (``-n N``) give each worker its own share of the CPUs, inherited by the
    environment workers, trainers and ranks it starts: they size their thread pools from the CPUs
    they may use, so N workers never oversubscribe the machine (torch's OpenMP threads spin, and an
    oversubscribed core made a single evaluation test 5x slower)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < count:
        return
    share = set(cpus[int(worker.removeprefix("gw")) % count::count])
    os.sched_setaffinity(0, share)
    os.environ["OMP_NUM_THREADS"] = str(len(share))


_pin_xdist_worker()

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REAL_VAL_UNSEEN = SHARED / "data" / "r2r_vlnce" / "val_unseen.json.gz"


@pytest.fixture(scope="session")
def real_val_unseen() -> Path:
    if not REAL_VAL_UNSEEN.exists():
        pytest.skip(f"the real R2R-VLN-CE file is not at {REAL_VAL_UNSEEN} (shared/ is beside the repo in CI)")
    return REAL_VAL_UNSEEN


def build_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder built once per test run and shared by every pytest-xdist worker of the run: the
    first worker to ask builds it under a lock in the run's common temporary folder, the others
    wait and then read it. Only complete builds are reused (a marker written after ``build``
    returns). Tests must treat the folder as read-only (copy it to change it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-of-<user>/pytest-<N>: common to this run's workers
    out, done = root / f"shared_{name}", root / f"shared_{name}.done"
    with open(root / f"shared_{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)  # a worker that failed while building it
            out.mkdir()
            build(out)
            done.touch()
    return out


@pytest.fixture(scope="session")
def tiny_benchmark(tmp_path_factory) -> Path:
    """The `tiny` synthetic benchmark, built once per test run (``build_once``)."""
    from ivln_ce.benchmark.synthetic import build_synthetic

    return build_once(tmp_path_factory, "synth_tiny", lambda out: build_synthetic("tiny", out, seed=0, progress=False))


@pytest.fixture
def cuda_exact():
    """A CUDA device for a CPU-vs-GPU comparison, with float32 kept float32 (no TF32 in
    convolutions, which cuDNN allows by default, or in matrix products) and deterministic cuDNN
    algorithms; the settings are restored afterwards. Skips where torch sees no CUDA device."""
    torch = pytest.importorskip("torch", reason="needs torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: torch.cuda.is_available() is False")
    b = torch.backends
    saved = (b.cudnn.deterministic, b.cudnn.benchmark, b.cudnn.allow_tf32, b.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
    b.cudnn.deterministic, b.cudnn.benchmark, b.cudnn.allow_tf32, b.cuda.matmul.allow_tf32 = True, False, False, False
    torch.set_float32_matmul_precision("highest")
    try:
        yield torch.device("cuda:0")
    finally:
        b.cudnn.deterministic, b.cudnn.benchmark, b.cudnn.allow_tf32, b.cuda.matmul.allow_tf32 = saved[:4]
        torch.set_float32_matmul_precision(saved[4])
