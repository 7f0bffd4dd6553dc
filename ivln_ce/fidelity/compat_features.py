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

Cache: one ``.npy`` (float16, (T, views + 1, D)) per path under the cache folder, named by a
SHA-256 over the path's scene id and points, the scene folder's file digests, the view settings,
the encoders' parameter bytes and this module's and the renderer's source code: a file is reused
only when every input that made it is the same. Files are written atomically and read with
``allow_pickle=False`` and their shape checked.
"""

from __future__ import annotations

import hashlib
import io
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
from ivln_ce.data.jsonio import atomic_write_bytes
from ivln_ce.env.tour_env import contained_scene_path
from ivln_ce.fidelity.compat_data import PathRef
from ivln_ce.fidelity.compat_model import GEOMETRY_DIM, ORIENTATION_DIM
from ivln_ce.geometry import heading_from_vector, wrap_angle
from ivln_ce.models.encoders import DepthEncoder, RGBEncoder

#: a cached feature file larger than this is refused
MAX_CACHE_FILE = 64 * 2**20


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
        if not self.spacing > 0:
            raise ValueError(f"view spacing must be > 0 m, got {self.spacing}")
        if self.max_viewpoints < 2 or self.views < 1 or self.size < 16:
            raise ValueError(f"need max_viewpoints >= 2, views >= 1 and size >= 16, got {self.max_viewpoints}, {self.views}, {self.size}")

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
        self.feature_dim = self.rgb.channels + 128 * 4
        h = hashlib.sha256()
        for module in (self.rgb.cnn, self.depth.visual_encoder):
            for name, t in sorted(module.state_dict().items()):
                h.update(name.encode())
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
        self.weights_digest = h.hexdigest()

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


class FeatureCache:
    """Path features by content key, in memory and (with ``folder``) on disk."""

    def __init__(self, encoder: FrameEncoder, folder: str | Path | None = None):
        self.encoder = encoder
        self.folder = Path(folder) if folder is not None else None
        self.memory: dict[str, np.ndarray] = {}
        self._scene_digests: dict[str, str] = {}
        self.reused = self.computed = 0
        self._context = fpr.digest({"settings": encoder.settings.to_dict(), "weights": encoder.weights_digest,
                                    "code": fpr.code_digest("fidelity/compat_features.py", "sim", "scenes", "models/encoders.py",
                                                            "models/resnet.py")})

    def _scene_digest(self, scene_id: str) -> str:
        if scene_id not in self._scene_digests:
            path = self.encoder.scene_path(scene_id)
            self._scene_digests[scene_id] = fpr.folder_digest(path.parent, f"{path.stem}*")
        return self._scene_digests[scene_id]

    def key(self, path: PathRef) -> str:
        return fpr.digest({"path": path.key, "scene": self._scene_digest(path.scene_id), "context": self._context})

    def _file(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / key[:2] / f"{key}.npy"

    def _read(self, f: Path, expect_views: int) -> np.ndarray | None:
        try:
            if f.stat().st_size > MAX_CACHE_FILE:
                return None
            arr = np.load(f, allow_pickle=False)
        except (OSError, ValueError):
            return None
        ok = (arr.dtype == np.float16 and arr.ndim == 3 and arr.shape[1] == expect_views and arr.shape[2] == self.encoder.feature_dim
              and 2 <= arr.shape[0] <= self.encoder.settings.max_viewpoints and np.all(np.isfinite(arr)))
        return arr if ok else None

    def get(self, path: PathRef) -> np.ndarray:
        if path.key in self.memory:
            return self.memory[path.key]
        views = self.encoder.settings.views + 1
        arr = None
        if self.folder is not None:
            f = self._file(self.key(path))
            if f.exists():
                arr = self._read(f, views)
        if arr is None:
            arr = self.encoder.encode(path)
            self.computed += 1
            if self.folder is not None:
                f.parent.mkdir(parents=True, exist_ok=True)
                buf = io.BytesIO()
                np.save(buf, arr, allow_pickle=False)
                atomic_write_bytes(f, buf.getvalue())
        else:
            self.reused += 1
        self.memory[path.key] = arr
        return arr

    def fill(self, paths: Iterable[PathRef], show_progress: bool = True, desc: str = "path features") -> None:
        unique = {p.key: p for p in paths}
        todo = sorted(unique.values(), key=lambda p: (p.scene_id, p.key))  # one scene load per scene
        for p in tqdm(todo, desc=desc, unit="path", disable=not show_progress or None):
            self.get(p)


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
