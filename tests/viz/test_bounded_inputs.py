"""Sizes declared by results files are bounded before anything is allocated.

Small forged files that declare huge arrays, maps, memories or frames make ``viz maps`` and
``viz report`` fail fast with a ``ResultsError`` naming the file and the field (the report leaves
the damaged record or frame out and says so on the page). The commands run in a child process
whose address space is limited to ``LIMIT`` bytes: code that allocated what the files declare
would die there with a MemoryError (a traceback, exit status 1) instead of exiting cleanly.
"""

from __future__ import annotations

import io
import os
import resource
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest

import ivln_ce
from ivln_ce.viz import records
from ivln_ce.viz.files import ResultsError
from ivln_ce.viz.records import read_frame, read_map_record
from tests.viz.conftest import SMALL_RUN, SMALL_TOUR

LIMIT = 3 << 29  # 1.5 GiB of address space: the commands need a few hundred MiB
REPO = Path(ivln_ce.__file__).resolve().parents[1]


def run_limited(*argv: str) -> subprocess.CompletedProcess:
    """``ivln-ce argv`` in a child process limited to LIMIT bytes of address space."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "ivln_ce.cli", *argv], capture_output=True, text=True, timeout=300,
                          preexec_fn=limit, env=env)


def npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a)
    return buf.getvalue()


def declared(shape: tuple, descr: str = "<f4", payload: bytes = b"") -> bytes:
    """A .npy member whose header declares ``shape`` and holds only ``payload``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue() + payload


def npz(path: Path, **members: bytes | np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for k, v in members.items():
            z.writestr(f"{k}.npy", v if isinstance(v, bytes) else npy(v))
    return path


def big_maps(side: int = 10_000) -> dict[str, np.ndarray]:
    """Egocentric maps of side x side cells: 10^8 zeros deflate to about 100 KB each."""
    return {"occupancy": np.zeros((side, side), np.uint8), "semantic": np.zeros((side, side), np.uint8)}


def sparse_memory() -> dict[str, np.ndarray]:
    return {"xyz": np.zeros((1, 3), np.float32), "labels": np.zeros(1, np.uint8)}


def jpeg_declaring(width: int, height: int) -> bytes:
    """A real 16 x 16 JPEG whose frame header is patched to declare width x height."""
    ok, buf = cv2.imencode(".jpg", np.random.default_rng(0).integers(0, 255, (16, 16, 3), dtype=np.uint8))
    data = bytearray(buf.tobytes())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


# --------------------------------------------------------------------------- the commands, memory-limited


def test_viz_maps_refuses_a_record_declaring_huge_maps(tmp_path):
    record = npz(tmp_path / "results" / "maps_a_val_unseen" / "0" / "7.npz", **sparse_memory(), **big_maps())
    assert record.stat().st_size < 400_000
    done = run_limited("viz", "maps", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "png"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "7.npz" in done.stderr and "'occupancy'" in done.stderr and "MAX_MAP_SIDE" in done.stderr
    assert "Traceback" not in done.stderr


def test_viz_maps_refuses_a_record_declaring_a_huge_memory(tmp_path):
    record = npz(tmp_path / "results" / "maps_a_val_unseen" / "0" / "7.npz", xyz=declared((1 << 33, 3)), labels=np.zeros(1, np.uint8))
    assert record.stat().st_size < 3000
    done = run_limited("viz", "maps", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "png"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "7.npz" in done.stderr and "'xyz'" in done.stderr and "points" in done.stderr


def test_viz_maps_draws_a_memory_spread_over_kilometres_at_a_bounded_size(tmp_path):
    """Two points 100 km apart (a 2.6 KB record) once asked for a picture of 3 million px a side."""
    xyz = np.array([[0.0, 0.0, 0.0], [1e5, 0.0, 1e5]], np.float32)
    npz(tmp_path / "results" / "maps_a_val_unseen" / "0" / "7.npz", xyz=xyz, labels=np.zeros(2, np.uint8))
    done = run_limited("viz", "maps", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "png"))
    assert done.returncode == 0, done.stderr[-2000:]
    img = cv2.imread(str(tmp_path / "png" / "maps_a_val_unseen" / "0" / "7.png"))
    from ivln_ce.viz.maps import MAX_ALLO_SIDE

    assert max(img.shape[:2]) <= MAX_ALLO_SIDE + 300  # the memory, then the legend beside it


def test_viz_report_leaves_out_records_and_frames_declaring_huge_sizes(small_results, tmp_path):
    res = tmp_path / "results"
    shutil.copytree(small_results, res)
    maps = res / f"maps_{SMALL_RUN}" / SMALL_TOUR
    first = sorted(p for p in maps.glob("*.npz") if p.stem != "tour")[0]
    npz(first, **sparse_memory(), **big_maps())
    frame = sorted((res / f"frames_{SMALL_RUN}" / SMALL_TOUR).glob("*_first.jpg"))[0]
    frame.write_bytes(jpeg_declaring(30000, 30000))
    done = run_limited("viz", "report", "--results", str(res), "--out", str(tmp_path / "report"), "--workers", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    page = (tmp_path / "report" / SMALL_RUN / f"tour_{SMALL_TOUR}.html").read_text()
    assert f"map record {first.name} is unreadable" in page and "&#x27;occupancy&#x27;" in page
    assert f"frame {frame.name} is left out" in page and "30000 x 30000" in page
    sizes = [cv2.imread(str(p), cv2.IMREAD_UNCHANGED).shape for p in (tmp_path / "report").rglob("*.png")]
    assert sizes and max(max(s[:2]) for s in sizes) <= 1400  # no 30000 px picture


# --------------------------------------------------------------------------- the readers, in process


def read_error(path: Path) -> str:
    with pytest.raises(ResultsError) as err:
        read_map_record(path, path.parent)
    assert str(path) in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("members, field", [
    ({"xyz": declared((records.MAX_MEMORY_POINTS + 1, 3)), "labels": np.zeros(1, np.uint8)}, "'xyz'"),
    ({"xyz": np.zeros((2, 3), np.float32), "labels": declared((1 << 40,), "|u1")}, "'labels'"),
    ({"path_agent": declared((records.MAX_PATH_POINTS + 1, 3), "<f8")}, "'path_agent'"),
    ({"occupancy": declared((4096, 4096), "|u1"), "semantic": np.zeros((4096, 4096), np.uint8)}, "'occupancy'"),
    ({"goal": declared((1 << 30,), "<f8")}, "'goal'"),
    ({"xyz": declared((4, 3), "<c8"), "labels": np.zeros(4, np.uint8)}, "dtype"),
    ({"xyz": declared((4, 3), "|O"), "labels": np.zeros(4, np.uint8)}, "dtype"),
    ({"xyz": declared((1000, 3), "<f4", b"\0" * 12), "labels": np.zeros(1000, np.uint8)}, "holds"),
    ({"xyz": np.full((2, 3), np.nan, np.float32), "labels": np.zeros(2, np.uint8)}, "finite"),
    ({"xyz": np.zeros((2, 3), np.float32), "labels": np.array([1, 300], np.int16)}, "[0, 255]"),
    ({"occupancy": np.zeros((8, 8)), "semantic": np.zeros((8, 9), np.uint8)}, "shape"),
    ({f"path_{k}": np.zeros((1, 3)) for k in range(records.MAX_RECORD_ARRAYS + 1)}, "MAX_RECORD_ARRAYS"),
])
def test_map_record_limits_are_checked_before_reading(tmp_path, members, field):
    assert field in read_error(npz(tmp_path / "r.npz", **members))


def test_a_member_inflating_beyond_its_declared_size_is_refused(tmp_path):
    """A zip member whose size field is larger than its array's header says (a compression bomb
    hiding behind a small shape) is refused from the sizes alone."""
    path = npz(tmp_path / "r.npz", xyz=declared((2, 3), "<f4", b"\0" * 24 + b"\0" * 10_000_000), labels=np.zeros(2, np.uint8))
    assert path.stat().st_size < 30_000
    assert "declares 24 bytes" in read_error(path)


def test_frames_are_bounded_by_their_header(tmp_path):
    f = tmp_path / "f.jpg"
    f.write_bytes(jpeg_declaring(30000, 30000))
    with pytest.raises(ResultsError, match=r"f\.jpg: a 30000 x 30000 image"):
        read_frame(f, tmp_path)
    f.write_bytes(jpeg_declaring(16, 16))
    assert read_frame(f, tmp_path).shape == (16, 16, 3)
    f.write_bytes(cv2.imencode(".png", np.zeros((8, 8, 3), np.uint8))[1].tobytes())  # a PNG named .jpg
    with pytest.raises(ResultsError, match="not a JPEG"):
        read_frame(f, tmp_path)


def test_limits_are_documented():
    doc = records.__doc__
    for name in ("MAX_RECORD_BYTES", "MAX_RECORD_ARRAYS", "MAX_MAP_SIDE", "MAX_MEMORY_POINTS", "MAX_PATH_POINTS",
                 "MAX_ABS_COORDINATE", "MAX_FRAME_BYTES", "MAX_FRAME_SIDE", "MAX_VIDEO_BYTES"):
        assert name in doc and hasattr(records, name)
