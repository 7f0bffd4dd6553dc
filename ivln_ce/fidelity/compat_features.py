"""Trajectory inputs of the compatibility model: viewpoints along a path, frames rendered there,
frozen CNN features, and a content-keyed cache of them.

Viewpoints: the path's polyline resampled at even arc length (``spacing``, widened so there are
at most ``max_viewpoints``; first and last points kept). The travel heading at a viewpoint points
to the next one (the last keeps the arrival heading). At each viewpoint ``views`` frames are
rendered at the travel heading + 2 pi k / views (k = 0 looks at the next viewpoint: e_next) and
one more toward the previous viewpoint (e_prev; behind at the start): a reduced panorama of the
seed's 36 views, one elevation.

Features per frame (frozen, as the toolkit's CPU recipes): the ResNet trunk's RGB features
averaged over space (512 for ResNet-18) and the small depth CNN's 128 x 4 x 4 map pooled to
2 x 2 (512). The encoders are seeded random initialisations unless ``rgb_weights`` is given.

Cache: one file per path under the cache folder, ``xx/<key>.f16``, ``key`` a SHA-256 over the
path's scene id and points, the scene folder's file digests, the view settings, the encoders'
parameter bytes and this module's and the renderer's source code. The file repeats the key and
holds the SHA-256 of its float16 (T, views + 1, D) data (``encode_entry``): a file is reused only
when it names the same inputs and its data is intact; otherwise it is recomputed. Files are
written atomically; nothing below the cache folder is followed through a link (``safe_paths``).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ivln_ce import fingerprint as fpr
from ivln_ce.config import load_config
from ivln_ce.data.jsonio import atomic_write_bytes, describe
from ivln_ce.env.tour_env import contained_scene_path
from ivln_ce.fidelity.compat_checks import MAX_SEED, check_float, check_int, check_text
from ivln_ce.fidelity.compat_data import PathRef
from ivln_ce.fidelity.compat_model import GEOMETRY_DIM, ORIENTATION_DIM
from ivln_ce.fidelity.compat_model import MAX_VIEWS as MAX_MODEL_VIEWS
from ivln_ce.geometry import heading_from_vector, wrap_angle
from ivln_ce.models.encoders import DepthEncoder, RGBEncoder
from ivln_ce.models.resnet import LAYOUTS
from ivln_ce.safe_paths import check_regular, inside, make_dirs, read_regular

#: bounds of the view settings (they may come from a checkpoint)
MAX_VIEWPOINTS = 64
MAX_VIEWS = MAX_MODEL_VIEWS
MAX_SIZE = 512
#: frames x pixels one path may render (the defaults: 245,760)
MAX_PIXELS_PER_PATH = 2**25
DEPTH_BACKBONES = ("small", "resnet50")
#: the depth CNN's 128 x 4 x 4 map pooled to 2 x 2
DEPTH_FEATURES = 128 * 4


@dataclass(frozen=True)
class ViewSettings:
    spacing: float = 1.5  # metres between viewpoints (R2R nodes are about 2 m apart)
    max_viewpoints: int = 12
    views: int = 4  # panorama views per viewpoint (+1 toward the previous viewpoint)
    size: int = 64  # square frames, 90 degrees field of view
    rgb_depth: int = 18
    depth_backbone: str = "small"
    encoder_seed: int = 0
    rgb_weights: str = ""  # torchvision / official ResNet weights for the RGB trunk (empty: seeded random)

    def __post_init__(self) -> None:
        """Types and ranges (the settings may come from a file): the frames one path renders
        are bounded before any is made."""
        check_float("view setting spacing (--spacing)", self.spacing, 0.0, 1000.0, lo_open=True)
        check_int("view setting max_viewpoints (--max-viewpoints)", self.max_viewpoints, 2, MAX_VIEWPOINTS)
        check_int("view setting views (--views)", self.views, 1, MAX_VIEWS)
        check_int("view setting size (--size)", self.size, 16, MAX_SIZE)
        pixels = self.max_viewpoints * (self.views + 1) * self.size**2
        if pixels > MAX_PIXELS_PER_PATH:
            raise ValueError(f"view settings --max-viewpoints {self.max_viewpoints} x (--views {self.views} + 1) x --size "
                             f"{self.size}^2: {pixels:,} pixels per path, more than {MAX_PIXELS_PER_PATH:,}")
        if not isinstance(self.rgb_depth, int) or isinstance(self.rgb_depth, bool) or self.rgb_depth not in LAYOUTS:
            raise ValueError(f"view setting rgb_depth: expected one of {sorted(LAYOUTS)}, got {describe(self.rgb_depth)}")
        if self.depth_backbone not in DEPTH_BACKBONES:
            raise ValueError(f"view setting depth_backbone: expected one of {list(DEPTH_BACKBONES)}, got {describe(self.depth_backbone)}")
        check_int("view setting encoder_seed", self.encoder_seed, 0, MAX_SEED)
        check_text("view setting rgb_weights (--rgb-weights)", self.rgb_weights)

    def to_dict(self) -> dict:
        return asdict(self)


def viewpoints(points, spacing: float, max_viewpoints: int) -> tuple[np.ndarray, np.ndarray]:
    """(T, 3) positions resampled along the polyline and (T,) travel headings."""
    p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    seg = np.linalg.norm(np.diff(p, axis=0)[:, [0, 2]], axis=1) if len(p) > 1 else np.zeros(0)
    cum = np.concatenate([[0.0], np.cumsum(seg)])
    total = float(cum[-1])
    if total <= 1e-6:
        pos = p[:1].repeat(2, axis=0)
    else:
        n = min(max_viewpoints, max(2, int(math.ceil(total / spacing)) + 1))
        s = np.linspace(0.0, total, n)
        pos = np.stack([np.interp(s, cum, p[:, k]) for k in range(3)], axis=1)
    headings = np.zeros(len(pos))
    for t in range(len(pos)):
        d = pos[t + 1] - pos[t] if t + 1 < len(pos) else pos[t] - pos[t - 1]
        headings[t] = heading_from_vector(d) if np.hypot(d[0], d[2]) > 1e-9 else (headings[t - 1] if t else 0.0)
    return pos, headings


def view_headings(pos: np.ndarray, headings: np.ndarray, views: int) -> np.ndarray:
    """(T, views + 1) absolute headings: the panorama around the travel heading, then toward the previous viewpoint."""
    out = np.zeros((len(pos), views + 1))
    for t in range(len(pos)):
        out[t, :views] = [wrap_angle(headings[t] + 2 * math.pi * k / views) for k in range(views)]
        d = pos[t - 1] - pos[t] if t else None
        out[t, views] = heading_from_vector(d) if d is not None and np.hypot(d[0], d[2]) > 1e-9 else wrap_angle(headings[t] + math.pi)
    return out


def orientation_features(pos: np.ndarray, headings: np.ndarray, views: int) -> np.ndarray:
    """(T, views + 1, 4): sin/cos of each view's absolute heading and of it relative to the travel heading."""
    vh = view_headings(pos, headings, views)
    rel = vh - headings[:, None]
    return np.stack([np.sin(vh), np.cos(vh), np.sin(rel), np.cos(rel)], axis=2).astype(np.float32)


def geometry_features(pos: np.ndarray, headings: np.ndarray) -> np.ndarray:
    """(T, 5): sin/cos of the turn into the travel heading at each viewpoint (left positive),
    the step length from the previous viewpoint, its height change, progress t / (T - 1)."""
    t = len(pos)
    turn = np.zeros(t)
    turn[1:] = [wrap_angle(headings[i] - headings[i - 1]) for i in range(1, t)]
    step = np.zeros(t)
    dy = np.zeros(t)
    if t > 1:
        step[1:] = np.linalg.norm(np.diff(pos, axis=0)[:, [0, 2]], axis=1)
        dy[1:] = np.diff(pos[:, 1])
    prog = np.arange(t) / max(t - 1, 1)
    g = np.stack([np.sin(turn), np.cos(turn), step, dy, prog], axis=1).astype(np.float32)
    assert g.shape[1] == GEOMETRY_DIM
    return g


class FrameEncoder:
    """The simulator (RGB and depth at ``size`` px) and the frozen encoders."""

    def __init__(self, settings: ViewSettings, scenes_dir: str | Path, device: str = "cpu", overrides: Iterable[str] = ()):
        from ivln_ce.sim import make_simulator

        self.settings = settings
        self.scenes_dir = Path(scenes_dir)
        self.device = torch.device(device)
        s = settings.size
        cfg = load_config(None, ["simulator.sensors=[rgb,depth]", "simulator.renderer=auto",
                                 *[f"simulator.{n}.{d}={s}" for n in ("rgb", "depth") for d in ("width", "height")],
                                 *[f"simulator.{n}.hfov=90.0" for n in ("rgb", "depth")], *overrides]).simulator
        self.sim = make_simulator(cfg)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(settings.encoder_seed))
            self.rgb = RGBEncoder(settings.rgb_depth)
            self.depth = DepthEncoder(settings.depth_backbone)
        if settings.rgb_weights:
            from ivln_ce.models.official_weights import load_rgb_trunk

            load_rgb_trunk(self.rgb, settings.rgb_weights)
        self.rgb.eval().to(self.device)
        self.depth.eval().to(self.device)
        self.feature_dim = self.rgb.channels + DEPTH_FEATURES
        assert self.feature_dim == self.feature_dim_of(settings)
        h = hashlib.sha256()
        for module in (self.rgb.cnn, self.depth.visual_encoder):
            for name, t in sorted(module.state_dict().items()):
                h.update(name.encode())
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
        self.weights_digest = h.hexdigest()

    @staticmethod
    def feature_dim_of(settings: ViewSettings) -> int:
        """Features per frame for these settings, without building the encoders."""
        return (512 if settings.rgb_depth in (18, 34) else 2048) + DEPTH_FEATURES

    def scene_path(self, scene_id: str) -> Path:
        path = contained_scene_path(self.scenes_dir, scene_id)
        if not path.exists():
            raise FileNotFoundError(f"{path}: scene {scene_id!r} not found under the scenes folder {self.scenes_dir}")
        return path

    @torch.no_grad()
    def encode(self, path: PathRef) -> np.ndarray:
        """(T, views + 1, D) float16 features of the frames along ``path``."""
        scene = str(self.scene_path(path.scene_id))
        if self.sim.scene_id != scene:
            self.sim.load_scene(scene)
        pos, head = viewpoints(path.points, self.settings.spacing, self.settings.max_viewpoints)
        vh = view_headings(pos, head, self.settings.views)
        rgb, depth = [], []
        for t in range(len(pos)):
            for h in vh[t]:
                self.sim.set_agent_state(pos[t], float(h))
                obs = self.sim.get_observations()
                rgb.append(obs.rgb)
                depth.append(obs.depth)
        r = self.rgb.features(torch.from_numpy(np.stack(rgb)).to(self.device)).mean(dim=(2, 3))
        d = F.adaptive_avg_pool2d(self.depth.features(torch.from_numpy(np.stack(depth)).to(self.device)), 2).flatten(1)
        f = torch.cat([r, d], dim=1).reshape(len(pos), vh.shape[1], -1)
        return f.cpu().numpy().astype(np.float16)

    def close(self) -> None:
        self.sim.close()


#: a cached feature file starts with this line, then one line of JSON header, then the float16 data
CACHE_MAGIC = b"ivln_ce.compat_features/2\n"
CACHE_SUFFIX = ".f16"
MAX_CACHE_HEADER = 4096
#: a cached feature file larger than this is recomputed
MAX_CACHE_FILE = 64 * 2**20


def encode_entry(key: str, arr: np.ndarray) -> bytes:
    """A cache file: the magic line, a header (the key that names the inputs, the shape, the
    SHA-256 of the data) and the little-endian float16 data."""
    payload = np.ascontiguousarray(arr, dtype="<f2").tobytes()
    header = json.dumps({"key": key, "shape": [int(n) for n in arr.shape], "dtype": "<f2",
                         "sha256": hashlib.sha256(payload).hexdigest()}, separators=(",", ":")).encode()
    return CACHE_MAGIC + header + b"\n" + payload


def decode_entry(data: bytes, key: str, views: int, feature_dim: int, max_viewpoints: int) -> np.ndarray | str:
    """The (T, views, feature_dim) array of a cache file, or why it cannot be used: made from
    other inputs (its key), a shape out of bounds, a size or checksum that disagrees, or values
    that are not finite. The shape is checked before anything is allocated."""
    if not data.startswith(CACHE_MAGIC):
        return "not a feature file of this version"
    end = data.find(b"\n", len(CACHE_MAGIC), len(CACHE_MAGIC) + MAX_CACHE_HEADER)
    if end < 0:
        return "no header line"
    try:
        head = json.loads(data[len(CACHE_MAGIC):end])
    except (ValueError, RecursionError):
        return "unreadable header"
    if not isinstance(head, dict) or head.get("key") != key:
        return "made from other inputs (its key differs)"
    shape = head.get("shape")
    if not (isinstance(shape, list) and len(shape) == 3 and all(type(n) is int for n in shape)):
        return "header shape is not three integers"
    t, v1, d = shape
    if not (2 <= t <= max_viewpoints and v1 == views and d == feature_dim):
        return f"shape {shape}, expected (2..{max_viewpoints}, {views}, {feature_dim})"
    payload = data[end + 1:]
    if len(payload) != t * v1 * d * 2:
        return f"{len(payload)} data bytes, the shape needs {t * v1 * d * 2}"
    if head.get("sha256") != hashlib.sha256(payload).hexdigest():
        return "checksum mismatch (damaged data)"
    arr = np.frombuffer(payload, dtype="<f2").reshape(t, v1, d).astype(np.float16)
    if not np.all(np.isfinite(arr)):
        return "values that are not finite"
    return arr


def scene_digest(scenes_dir: str | Path, scene_id: str) -> str:
    """Digest of a scene's files (the scene folder's files named like it), the id contained in the folder."""
    path = contained_scene_path(Path(scenes_dir), scene_id)
    return fpr.folder_digest(path.parent, f"{path.stem}*")


class FeatureCache:
    """Path features by content key, in memory and (with ``root``) on disk under ``root/sub``.

    ``root`` is the folder the user named (it may be a link); nothing below it is followed: a
    link, FIFO or folder where a cache folder or file should be is refused (``UnsafePath``). A
    file that cannot be used (see ``decode_entry``) is recomputed and replaced; ``replaced``
    names each with the reason."""

    def __init__(self, encoder: FrameEncoder, root: str | Path | None = None, sub: tuple[str, ...] = ()):
        self.encoder = encoder
        self.root = Path(root) if root is not None else None
        self.sub = tuple(sub)
        self.memory: dict[str, np.ndarray] = {}
        self._scene_digests: dict[str, str] = {}
        self.reused = self.computed = 0
        self.replaced: list[str] = []
        self._context = fpr.digest({"settings": encoder.settings.to_dict(), "weights": encoder.weights_digest,
                                    "code": fpr.code_digest("fidelity/compat_features.py", "sim", "scenes", "models/encoders.py",
                                                            "models/resnet.py")})
        if self.root is not None:
            inside(self.root, *self.sub)  # a link planted for the cache folder is refused before any work

    @property
    def folder(self) -> Path | None:
        return None if self.root is None else self.root.joinpath(*self.sub)

    def _scene_digest(self, scene_id: str) -> str:
        if scene_id not in self._scene_digests:
            self.encoder.scene_path(scene_id)  # exists, inside the scenes folder
            self._scene_digests[scene_id] = scene_digest(self.encoder.scenes_dir, scene_id)
        return self._scene_digests[scene_id]

    def key(self, path: PathRef) -> str:
        return fpr.digest({"path": path.key, "scene": self._scene_digest(path.scene_id), "context": self._context})

    def _file(self, key: str) -> Path:
        assert self.root is not None
        return inside(self.root, *self.sub, key[:2], f"{key}{CACHE_SUFFIX}")

    def _read(self, f: Path, key: str) -> np.ndarray | None:
        try:
            st = check_regular(f)  # a link, FIFO or folder: UnsafePath
        except FileNotFoundError:
            return None
        settings = self.encoder.settings
        if st.st_size > MAX_CACHE_FILE:
            got: np.ndarray | str = f"{st.st_size:,} bytes, more than {MAX_CACHE_FILE:,}"
        else:
            got = decode_entry(read_regular(f, MAX_CACHE_FILE), key, settings.views + 1, self.encoder.feature_dim,
                               settings.max_viewpoints)
        if isinstance(got, str):
            self.replaced.append(f"{f} ({got})")
            return None
        return got

    def get(self, path: PathRef) -> np.ndarray:
        if path.key in self.memory:
            return self.memory[path.key]
        arr = None
        if self.root is not None:
            key = self.key(path)
            f = self._file(key)
            arr = self._read(f, key)
        if arr is None:
            arr = self.encoder.encode(path)
            self.computed += 1
            if self.root is not None:
                make_dirs(self.root, *self.sub, key[:2])
                atomic_write_bytes(self._file(key), encode_entry(key, arr))
        else:
            self.reused += 1
        self.memory[path.key] = arr
        return arr

    def fill(self, paths: Iterable[PathRef], show_progress: bool = True, desc: str = "path features") -> None:
        unique = {p.key: p for p in paths}
        todo = sorted(unique.values(), key=lambda p: (p.scene_id, p.key))  # one scene load per scene
        for p in tqdm(todo, desc=desc, unit="path", disable=not show_progress or None):
            self.get(p)

    def summary(self) -> str:
        """One line for the log: computed, reused and replaced files."""
        where = f" from {self.folder}" if self.folder is not None else ""
        line = f"path features: {self.computed} computed, {self.reused} reused{where}"
        if self.replaced:
            line += f"; {len(self.replaced)} cache file(s) could not be used and were recomputed, e.g. {self.replaced[0]}"
        return line


@dataclass
class TrajectoryBatch:
    views: torch.Tensor  # (N, T, V+1, D)
    orientation: torch.Tensor  # (N, T, V+1, 4)
    geometry: torch.Tensor  # (N, T, 5)
    lengths: torch.Tensor  # (N,)


def trajectory_batch(paths: list[PathRef], features: Callable[[PathRef], np.ndarray], settings: ViewSettings,
                     device: str | torch.device = "cpu") -> TrajectoryBatch:
    feats = [features(p) for p in paths]
    n, t_max = len(paths), max(f.shape[0] for f in feats)
    v1, d = feats[0].shape[1], feats[0].shape[2]
    views = np.zeros((n, t_max, v1, d), dtype=np.float32)
    orient = np.zeros((n, t_max, v1, ORIENTATION_DIM), dtype=np.float32)
    geo = np.zeros((n, t_max, GEOMETRY_DIM), dtype=np.float32)
    lengths = np.zeros(n, dtype=np.int64)
    for i, (p, f) in enumerate(zip(paths, feats)):
        pos, head = viewpoints(p.points, settings.spacing, settings.max_viewpoints)
        if len(pos) != f.shape[0]:
            raise ValueError(f"path {p.key[:12]}: {f.shape[0]} cached viewpoints, {len(pos)} expected")
        t = len(pos)
        views[i, :t] = f
        orient[i, :t] = orientation_features(pos, head, settings.views)
        geo[i, :t] = geometry_features(pos, head)
        lengths[i] = t
    dev = torch.device(device)
    return TrajectoryBatch(torch.from_numpy(views).to(dev), torch.from_numpy(orient).to(dev), torch.from_numpy(geo).to(dev),
                           torch.from_numpy(lengths).to(dev))
