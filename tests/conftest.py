from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REAL_VAL_UNSEEN = SHARED / "data" / "r2r_vlnce" / "val_unseen.json.gz"


@pytest.fixture(scope="session")
def real_val_unseen() -> Path:
    if not REAL_VAL_UNSEEN.exists():
        pytest.skip(f"the real R2R-VLN-CE file is not at {REAL_VAL_UNSEEN} (shared/ is beside the repo in CI)")
    return REAL_VAL_UNSEEN


@pytest.fixture(scope="session")
def tiny_benchmark(tmp_path_factory) -> Path:
    """The `tiny` synthetic benchmark, built once per test session."""
    from ivln_ce.benchmark.synthetic import build_synthetic

    out = tmp_path_factory.mktemp("synth_tiny")
    build_synthetic("tiny", out, seed=0, progress=False)
    return out
