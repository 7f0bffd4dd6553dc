"""Map records, RGB frames and episode videos of a results folder, read within documented limits.

Every size a file declares is checked before anything is allocated for it: a 2.6 KB map record
could otherwise declare a 10^10-cell array, a map 10^5 m across (a picture of gigapixels), or a
JPEG header a 30000 x 30000 frame. The limits (module constants; tests may lower them):

``MAX_RECORD_BYTES``   a map record (``.npz``) on disk: 256 MiB
``MAX_RECORD_ARRAYS``  arrays in one record: 16 (the evaluator writes 3 to 7)
``MAX_MAP_SIDE``       side of the egocentric maps, cells: 1024 (``mapping.map_size`` is at most 1024)
``MAX_MEMORY_POINTS``  points of the allocentric memory: 4,000,000 (a 100 m x 100 m floor at 5 cm)
``MAX_PATH_POINTS``    points of a path: ``data.targets.MAX_TOUR_POINTS`` (1,000,000)
``MAX_ABS_COORDINATE`` any coordinate, metres: ``data.targets.MAX_ABS_COORDINATE`` (10^6)
``MAX_FRAME_BYTES``    an RGB frame file: 32 MiB; ``MAX_FRAME_SIDE``: 4096 px a side (a JPEG)
``MAX_VIDEO_BYTES``    an episode video: 1 GiB (an ``.mp4`` or ``.webm`` by its first bytes)

Class labels (memory labels, semantic maps) are integers in [0, 255], as the evaluator writes
them (uint8); values beyond the known classes are drawn as occupied cells. Arrays a record may
hold besides these are not read. A violation is a ``ResultsError`` naming the file and array.
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ivln_ce.data.targets import MAX_ABS_COORDINATE, MAX_TOUR_POINTS
from ivln_ce.viz.files import ResultsError, input_file

MAX_RECORD_BYTES = 256 << 20
MAX_RECORD_ARRAYS = 16
MAX_MAP_SIDE = 1024
MAX_MEMORY_POINTS = 4_000_000
MAX_PATH_POINTS = MAX_TOUR_POINTS
MAX_FRAME_BYTES = 32 << 20
MAX_FRAME_SIDE = 4096
MAX_VIDEO_BYTES = 1 << 30

#: what zipfile and numpy's header parser raise on damaged input
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError, ValueError, SyntaxError)


@dataclass
class MapRecord:
    """One map record, checked: memory points, their labels, paths, goal and egocentric maps."""

    xyz: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.float32))
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    paths: dict[str, np.ndarray] = field(default_factory=dict)
    goal: np.ndarray | None = None
    occupancy: np.ndarray | None = None
    semantic: np.ndarray | None = None


def _points(limit: int):
    def check(shape: tuple) -> str | None:
        if len(shape) != 2 or shape[1] != 3:
            return "expected (N, 3) points"
        return f"more than {limit:,} points" if shape[0] > limit else None

    return check


def _map(shape: tuple) -> str | None:
    if len(shape) != 2 or not all(1 <= s <= MAX_MAP_SIDE for s in shape):
        return f"expected an (H, W) map of 1 to {MAX_MAP_SIDE} (MAX_MAP_SIDE) cells a side"
    return None


def _labels(shape: tuple) -> str | None:
    if len(shape) != 1:
        return "expected (N,) labels"
    return f"more than {MAX_MEMORY_POINTS:,} labels (MAX_MEMORY_POINTS)" if shape[0] > MAX_MEMORY_POINTS else None


#: array name -> (dtype kinds accepted, shape check)
_SPECS = {
    "xyz": ("fiu", _points(MAX_MEMORY_POINTS)),
    "labels": ("biu", _labels),
    "goal": ("fiu", lambda s: None if s == (3,) else "expected [x, y, z]"),
    "path_": ("fiu", _points(MAX_PATH_POINTS)),
    "occupancy": ("biuf", _map),
    "semantic": ("biu", _map),
}


def _spec(name: str):
    key = "path_" if name.startswith("path_") and len(name) > 5 else name
    return _SPECS.get(key)


def _header(fh, where: str) -> tuple[tuple, bool, np.dtype]:
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fh)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(fh)
    raise ResultsError(f"{where}: .npy format version {version} (1.0 or 2.0 expected)")


def _read_array(z: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, where: str) -> np.ndarray:
    """One array, its declared dtype, shape and size checked before its data is read."""
    kinds, shape_check = _spec(name)
    with z.open(info) as fh:
        shape, fortran, dtype = _header(fh, where)
        if dtype.kind not in kinds or dtype.hasobject or dtype.names is not None or dtype.subdtype is not None or dtype.itemsize > 8:
            raise ResultsError(f"{where}: dtype {dtype.str} (expected {'/'.join(_KIND_NAMES[k] for k in kinds)} numbers)")
        problem = shape_check(tuple(shape))
        if problem:
            raise ResultsError(f"{where}: shape {tuple(shape)}: {problem}")
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if info.file_size != fh.tell() + nbytes:
            raise ResultsError(f"{where}: declares {nbytes:,} bytes of data for shape {tuple(shape)} but holds {info.file_size - fh.tell():,}")
        data = fh.read(nbytes)
    if len(data) != nbytes:
        raise ResultsError(f"{where}: truncated ({len(data):,} of {nbytes:,} bytes)")
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


_KIND_NAMES = {"b": "bool", "i": "integer", "u": "unsigned", "f": "float"}


def _coordinates(a: np.ndarray, where: str) -> np.ndarray:
    a = a.astype(np.float64)
    if a.size and not (np.isfinite(a).all() and np.abs(a).max() <= MAX_ABS_COORDINATE):
        raise ResultsError(f"{where}: expected finite coordinates within +-{MAX_ABS_COORDINATE:g} m (MAX_ABS_COORDINATE)")
    return a


def _classes(a: np.ndarray, where: str) -> np.ndarray:
    if a.size and (int(a.min()) < 0 or int(a.max()) > 255):
        raise ResultsError(f"{where}: class labels must lie in [0, 255], got [{int(a.min())}, {int(a.max())}]")
    return a.astype(np.uint8)


def _record(arrays: dict[str, np.ndarray], path: Path) -> MapRecord:
    rec = MapRecord()
    if ("xyz" in arrays) != ("labels" in arrays):
        raise ResultsError(f"{path}: holds {'xyz' if 'xyz' in arrays else 'labels'} without {'labels' if 'xyz' in arrays else 'xyz'}")
    if "xyz" in arrays:
        rec.xyz = _coordinates(arrays["xyz"], f"{path}: array 'xyz'").astype(np.float32)
        rec.labels = _classes(arrays["labels"], f"{path}: array 'labels'")
        if len(rec.labels) != len(rec.xyz):
            raise ResultsError(f"{path}: {len(rec.xyz)} memory points but {len(rec.labels)} labels")
    rec.paths = {k[len("path_"):]: _coordinates(v, f"{path}: array {k!r}") for k, v in sorted(arrays.items()) if k.startswith("path_")}
    if "goal" in arrays:
        rec.goal = _coordinates(arrays["goal"], f"{path}: array 'goal'")
    if ("occupancy" in arrays) != ("semantic" in arrays):
        raise ResultsError(f"{path}: holds {'occupancy' if 'occupancy' in arrays else 'semantic'} without its companion map")
    if "occupancy" in arrays:
        if arrays["occupancy"].shape != arrays["semantic"].shape:
            raise ResultsError(f"{path}: occupancy {arrays['occupancy'].shape} and semantic {arrays['semantic'].shape} maps differ in shape")
        rec.occupancy = np.asarray(arrays["occupancy"] > 0)
        rec.semantic = _classes(arrays["semantic"], f"{path}: array 'semantic'")
    return rec


def read_map_record(path: Path, root: Path) -> MapRecord:
    """A map record of the results folder ``root``, every declared size checked before reading."""
    input_file(path, root)
    if path.stat().st_size > MAX_RECORD_BYTES:
        raise ResultsError(f"{path}: {path.stat().st_size:,} bytes; a map record holds at most {MAX_RECORD_BYTES:,} (MAX_RECORD_BYTES)")
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            if len(infos) > MAX_RECORD_ARRAYS:
                raise ResultsError(f"{path}: {len(infos)} members; a map record holds at most {MAX_RECORD_ARRAYS} arrays (MAX_RECORD_ARRAYS)")
            for info in infos:
                name = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else ""
                if _spec(name) is None:
                    continue  # not an array the viewers draw: never read
                if name in arrays:
                    raise ResultsError(f"{path}: array {name!r} appears twice")
                arrays[name] = _read_array(z, info, name, f"{path}: array {name!r}")
    except _DAMAGE as exc:
        if isinstance(exc, ResultsError):
            raise
        raise ResultsError(f"{path}: not a readable map record ({type(exc).__name__}: {exc})") from exc
    return _record(arrays, path)


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header, or None when there is none before the scan."""
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # SOF0-15 (not DHT, JPG, DAC)
            if i + 9 > len(data):
                return None
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        if marker in (0xD9, 0xDA):  # end of image or a scan before any frame header
            return None
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None


def read_frame(path: Path, root: Path) -> np.ndarray:
    """A recorded RGB frame (BGR, as OpenCV decodes it), its size checked before decoding."""
    import cv2

    input_file(path, root)
    size = path.stat().st_size
    if size > MAX_FRAME_BYTES:
        raise ResultsError(f"{path}: {size:,} bytes; a frame holds at most {MAX_FRAME_BYTES:,} (MAX_FRAME_BYTES)")
    data = path.read_bytes()
    wh = jpeg_size(data)
    if wh is None:
        raise ResultsError(f"{path}: not a JPEG image (no frame header)")
    if not all(1 <= s <= MAX_FRAME_SIDE for s in wh):
        raise ResultsError(f"{path}: a {wh[0]} x {wh[1]} image; frames are 1 to {MAX_FRAME_SIDE} px a side (MAX_FRAME_SIDE)")
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise ResultsError(f"{path}: not a decodable JPEG image")
    return img


#: a video's first bytes by suffix: an ISO media file's 'ftyp' box, WebM's EBML header
VIDEO_MAGIC = {".mp4": (4, b"ftyp"), ".webm": (0, b"\x1a\x45\xdf\xa3")}


def check_video(path: Path, root: Path) -> Path:
    """``path`` if it is an episode video of the results folder ``root``: size and kind checked."""
    input_file(path, root)
    size = path.stat().st_size
    if size > MAX_VIDEO_BYTES:
        raise ResultsError(f"{path}: {size:,} bytes; a video holds at most {MAX_VIDEO_BYTES:,} (MAX_VIDEO_BYTES)")
    offset, magic = VIDEO_MAGIC[path.suffix]
    with open(path, "rb") as fh:
        head = fh.read(offset + len(magic))
    if head[offset:] != magic:
        raise ResultsError(f"{path}: not an {path.suffix[1:].upper()} video (its first bytes say otherwise)")
    return path
