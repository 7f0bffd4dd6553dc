import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ivln_ce.metrics.dtw import IncrementalDTW, dedupe_consecutive, dtw, euclidean


def brute_force_dtw(x, y, allowed=None):
    """Full-matrix DTW by the textbook recursion; ``allowed`` (n, m) bools forbid cells."""
    n, m = len(x), len(y)
    c = euclidean(x, y)
    D = np.full((n + 1, m + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            if allowed is not None and not allowed[i - 1, j - 1]:
                continue
            D[i, j] = c[i - 1, j - 1] + min(D[i - 1, j - 1], D[i - 1, j], D[i, j - 1])
    return D[n, m]


points = st.integers(1, 9).flatmap(
    lambda n: st.lists(
        st.tuples(*[st.floats(-5, 5, allow_nan=False) for _ in range(3)]), min_size=n, max_size=n
    )
)


def test_hand_computed_value():
    x = np.array([[0, 0, 0], [1, 0, 0]], float)
    y = np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0]], float)
    # D(1,1)=0, D(1,2)=1, D(1,3)=3, D(2,1)=1, D(2,2)=0, D(2,3)=1+min(1,3,0)=1
    assert dtw(x, y) == pytest.approx(1.0)
    assert dtw(y, x) == pytest.approx(1.0)


@settings(max_examples=150, deadline=None)
@given(points, points)
def test_kernel_matches_brute_force(a, b):
    x, y = np.array(a), np.array(b)
    assert dtw(x, y) == pytest.approx(brute_force_dtw(x, y), rel=1e-12, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(points, points)
def test_callable_distance_path_matches_fused_euclidean(a, b):
    x, y = np.array(a), np.array(b)

    def scaled(p, q):  # not the euclidean object itself -> exercises the row-callable driver
        return 2.0 * euclidean(p, q)

    assert dtw(x, y, scaled) == pytest.approx(2.0 * dtw(x, y), rel=1e-12, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(points, points, st.booleans(), st.booleans(), st.booleans())
def test_pins_match_a_windowed_brute_force(a, b, pin_first, pin_last, origin_free):
    x, y = np.array(a), np.array(b)
    n, m = len(x), len(y)
    allowed = np.ones((n, m), bool)
    if pin_first:
        allowed[:, 0] = False
        allowed[0, 0] = True
    if pin_last:  # applied after pin_first: the later pin wins on a one-column block
        allowed[:, m - 1] = False
        allowed[n - 1, m - 1] = True
    if origin_free:
        allowed[0, 0] = True
    got = dtw(x, y, pin_first=pin_first, pin_last=pin_last, origin_free=origin_free)
    want = brute_force_dtw(x, y, allowed)
    if math.isinf(want):
        assert math.isinf(got)
    else:
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(points, points)
def test_incremental_equals_batch_after_every_point(a, b):
    x, y = np.array(a), np.array(b)
    inc = IncrementalDTW(y)
    for k in range(len(x)):
        assert inc.add(x[k]) == pytest.approx(dtw(x[: k + 1], y), rel=1e-12, abs=1e-12)


def test_dedupe_consecutive_keeps_non_adjacent_repeats():
    p = np.array([[0, 0, 0], [0, 0, 0], [1, 0, 0], [1, 0, 0], [0, 0, 0]], float)
    np.testing.assert_array_equal(dedupe_consecutive(p), p[[0, 2, 4]])


def test_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        dtw(np.zeros((3, 2)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="at least one point"):
        dtw(np.zeros((0, 3)), np.zeros((2, 3)))


def _python(code: str, env: dict) -> "subprocess.CompletedProcess":
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)


_KERNEL_CALL = "import numpy as np; from ivln_ce.metrics.dtw import dtw; print(dtw(np.zeros((2, 3)), np.ones((3, 3)), pin_first=True))"


def test_kernels_are_cached_on_disk_and_loaded_by_the_next_process(tmp_path):
    import os

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "NUMBA_DEBUG_CACHE": "1"}
    first = _python(_KERNEL_CALL, env)
    assert first.returncode == 0, first.stderr
    assert list((tmp_path / "cache").rglob("dtw._dtw_euclidean-*.nbi")), "no cache index was written"
    second = _python(_KERNEL_CALL, env)
    assert second.returncode == 0, second.stderr
    assert "data loaded" in second.stdout + second.stderr  # loaded, not compiled again
    assert first.stdout.split()[-1] == second.stdout.split()[-1]


def test_kernels_compile_in_memory_where_no_cache_folder_is_writable():
    import os

    code = ("import warnings; warnings.simplefilter('always'); import numba.core.caching as c; "
            "c.CacheImpl._locator_classes = []; " + _KERNEL_CALL)  # numba then finds no writable location
    r = _python(code, dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert float(r.stdout.split()[-1]) == pytest.approx(dtw(np.zeros((2, 3)), np.ones((3, 3)), pin_first=True))
    assert r.stderr.count("no writable cache folder") == 1


def test_block_kernel_equals_block_by_block_dtw():
    from ivln_ce.metrics.dtw import dtw_blocks

    rng = np.random.default_rng(4)
    for _ in range(60):
        K = int(rng.integers(1, 6))
        n, m = rng.integers(1, 7, size=K), rng.integers(1, 7, size=K)
        x, y = rng.normal(size=(n.sum(), 3)), rng.normal(size=(m.sum(), 3))
        xb, yb = np.concatenate([[0], np.cumsum(n)]), np.concatenate([[0], np.cumsum(m)])
        for pinned in (True, False):
            got = dtw_blocks(x, xb, y, yb, pinned)
            want = [dtw(x[xb[k]:xb[k + 1]], y[yb[k]:yb[k + 1]], pin_first=pinned and k > 0,
                        pin_last=pinned and k < K - 1, origin_free=pinned and k == 0) for k in range(K)]
            np.testing.assert_array_equal(got, want)
