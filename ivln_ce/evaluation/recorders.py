"""What an evaluation records besides metrics: map records and first/last RGB frames per episode.

Recorders watch the rollout engine's views (main process). An episode's records are written
when its agent-done info arrives and are named by ``metrics_episode_id``, the episode that
finished, never by the episode current at that moment. "At the episode's end" means the
observation the agent decided STOP (or its last action) on: the view before the agent-done
one, because the agent-done step's own frame is never seen by a policy. File names derived
from ids in data files go through ``safe_name``, so an id such as ``../../x`` cannot place a
file outside the results folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence
import numpy as np

from ivln_ce.data.jsonio import atomic_write_bytes
from ivln_ce.env.tour_env import TourItem
from ivln_ce.rollout.streams import StreamView
from ivln_ce.rollout.records import TourResult


_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def safe_name(identifier: str) -> str:
    """A file-name component for an id from a data file: letters, digits, '-' and '_' pass,
    everything else (``/``, ``.``, ``%`` ...) is percent-encoded, so the mapping is reversible
    and the result can never be ``..`` or contain a separator."""
    text = str(identifier)
    if not text:
        raise ValueError("an empty id cannot name a file")
    return "".join(ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in text)


def contained(root: Path, *parts: str) -> Path:
    """``root / parts`` after checking the result stays inside ``root``."""
    base = root.resolve()
    path = base.joinpath(*parts).resolve()
    if not path.is_relative_to(base):
        raise ValueError(f"refusing to write outside {base}: {path}")
    return path


def _npz_bytes(**arrays: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


class _PerStream:
    """The last agent-phase view (and its maps) of every stream."""

    def __init__(self):
        self.last: dict[str, tuple[StreamView, dict[str, Any] | None]] = {}

    def finished(self, view: StreamView) -> tuple[StreamView, dict | None] | None:
        return self.last.get(view.stream_id)

    def remember(self, view: StreamView, maps: dict | None) -> None:
        if view.info.get("produce_action"):
            self.last[view.stream_id] = (view, maps)

    def drop(self, stream: str) -> None:
        self.last.pop(stream, None)


class MapRecorder:
    """``maps_{label}_{split}/{tour}/{episode}.npz`` at each episode's end and ``tour.npz`` at
    the tour's end: the egocentric maps, the stream's allocentric memory, the agent path, the
    reference path and the goal (read by ``ivln-ce viz maps`` and the report)."""

    needs_maps = True

    def __init__(self, folder: Path, items: Sequence[TourItem], mapper):
        self.folder = folder
        self.mapper = mapper
        self.episodes = {e.episode_id: e for it in items for e in it.episodes}
        self.state = _PerStream()
        self.written: list[Path] = []

    def _memory(self, stream: str) -> tuple[np.ndarray, np.ndarray]:
        if hasattr(self.mapper, "memory_points"):
            xyz, labels = self.mapper.memory_points(stream)
        else:
            xyz, labels = self.mapper.grid.points(stream)
        return np.asarray(xyz.cpu() if hasattr(xyz, "cpu") else xyz), np.asarray(labels.cpu() if hasattr(labels, "cpu") else labels)

    def observe(self, views: Sequence[StreamView], maps: Sequence[dict | None]) -> None:
        for view, m in zip(views, maps):
            info = view.info
            if "metrics" in info:
                last = self.state.finished(view)
                eid = info["metrics_episode_id"]
                ep = self.episodes[eid]
                xyz, labels = self._memory(view.stream_id)
                arrays = dict(xyz=xyz.astype(np.float32), labels=labels.astype(np.uint8), goal=np.asarray(ep.goal_position),
                              path_agent=np.asarray(info.get("agent_path", []), dtype=np.float64).reshape(-1, 3),
                              path_reference=np.asarray(ep.reference_path, dtype=np.float64))
                if last is not None and last[1] is not None:
                    arrays["occupancy"], arrays["semantic"] = last[1]["occupancy_map"], last[1]["semantic_map"]
                self._write(contained(self.folder, safe_name(view.tour_id), safe_name(eid) + ".npz"), arrays)
            self.state.remember(view, m)

    def on_tour(self, result: TourResult, stream: str) -> None:
        xyz, labels = self._memory(stream)
        path = np.asarray([e["position"] for e in result.path], dtype=np.float64).reshape(-1, 3)
        self._write(contained(self.folder, safe_name(result.tour_id), "tour.npz"),
                    dict(xyz=xyz.astype(np.float32), labels=labels.astype(np.uint8), path_tour=path))
        self.state.drop(stream)

    def _write(self, path: Path, arrays: dict[str, np.ndarray]) -> None:
        atomic_write_bytes(path, _npz_bytes(**arrays))
        self.written.append(path)


class FrameRecorder:
    """``frames_{label}_{split}/{tour}/{episode}_first.jpg`` and ``_last.jpg``: the RGB of the
    episode's first agent observation and of the one its last action was chosen on."""

    needs_maps = False

    def __init__(self, folder: Path, quality: int = 90):
        self.folder = folder
        self.quality = quality
        self.state = _PerStream()
        self._first_done: set[tuple[str, str]] = set()

    def _save(self, path: Path, rgb: np.ndarray) -> None:
        import cv2

        ok, data = cv2.imencode(".jpg", np.ascontiguousarray(rgb[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        if not ok:
            raise RuntimeError(f"could not encode {path}")
        atomic_write_bytes(path, data.tobytes())

    def observe(self, views: Sequence[StreamView], maps: Sequence[dict | None]) -> None:
        for view in views:
            info = view.info
            if "metrics" in info:
                last = self.state.finished(view)
                eid = info["metrics_episode_id"]
                if last is not None and "rgb" in last[0].obs:
                    self._save(contained(self.folder, safe_name(view.tour_id), f"{safe_name(eid)}_last.jpg"), last[0].obs["rgb"])
            if info.get("produce_action") and "rgb" in view.obs:
                key = (view.stream_id, info["episode_id"])
                if key not in self._first_done:
                    self._first_done.add(key)
                    self._save(contained(self.folder, safe_name(view.tour_id), f"{safe_name(info['episode_id'])}_first.jpg"), view.obs["rgb"])
            self.state.remember(view, None)

    def on_tour(self, result: TourResult, stream: str) -> None:
        self.state.drop(stream)
        self._first_done = {k for k in self._first_done if k[0] != stream}


class VideoRecorder:
    """``videos_{label}_{split}/{tour}/{episode}.mp4`` per episode (``eval.video=true``): RGB |
    depth | egocentric map | top-down with the path so far, one frame per agent observation;
    written on the episode's agent-done step, dropped if its tour is cut short."""

    needs_maps = True

    def __init__(self, folder: Path, items: Sequence[TourItem], scenes_dir: Path | None, fps: float = 8.0):
        self.folder = folder
        self.fps = fps
        self.scenes_dir = scenes_dir
        self.episodes = {e.episode_id: e for it in items for e in it.episodes}
        self.open: dict[str, tuple[str, Any, list]] = {}  # stream -> (episode id, video, positions)
        self._trails: dict[str, Any] = {}
        self._layouts: dict[str, Any] = {}
        self.written: list[Path] = []

    def _layout(self, scene_id: str):
        if scene_id not in self._layouts:
            layout = None
            if self.scenes_dir is not None:
                try:
                    from ivln_ce.env.tour_env import contained_scene_path
                    from ivln_ce.scenes.mesh import load_scene

                    layout = load_scene(contained_scene_path(self.scenes_dir, scene_id)).layout
                except (OSError, ValueError, KeyError):
                    layout = None  # a real scan without the generator's sidecar: no plan panel
            self._layouts[scene_id] = layout
        return self._layouts[scene_id]

    def _close(self, stream: str, keep: bool) -> None:
        entry = self.open.pop(stream, None)
        if entry is None:
            return
        _, video, _ = entry
        if keep:
            self.written.append(video.close())
        else:
            video.abort()

    def observe(self, views: Sequence[StreamView], maps: Sequence[dict | None]) -> None:
        from ivln_ce.viz.maps import egocentric_image
        from ivln_ce.viz.video import EpisodeVideo, TopdownTrail

        for view, m in zip(views, maps):
            info = view.info
            if "metrics" in info and view.stream_id in self.open and self.open[view.stream_id][0] == info["metrics_episode_id"]:
                self._close(view.stream_id, keep=True)
            if not info.get("produce_action") or "rgb" not in view.obs:
                continue
            eid = info["episode_id"]
            entry = self.open.get(view.stream_id)
            if entry is None or entry[0] != eid:
                self._close(view.stream_id, keep=False)
                ep = self.episodes[eid]
                path = contained(self.folder, safe_name(view.tour_id), safe_name(eid) + ".mp4")
                layout = self._layout(ep.scene_id)
                self._trails[view.stream_id] = TopdownTrail(layout, np.asarray(ep.reference_path), np.asarray(ep.goal_position)) if layout else None
                entry = (eid, EpisodeVideo(path, fps=self.fps), [])
                self.open[view.stream_id] = entry
            _, video, positions = entry
            positions.append(np.asarray(view.obs["position"], dtype=np.float64))
            trail = self._trails.get(view.stream_id)
            ego = egocentric_image(m["occupancy_map"], m["semantic_map"]) if m is not None else None
            video.add(view.obs["rgb"], view.obs.get("depth"), ego,
                      trail(np.asarray(positions), float(np.asarray(view.obs["heading"]).reshape(-1)[0])) if trail else None)

    def on_tour(self, result: TourResult, stream: str) -> None:
        self._close(stream, keep=False)
        self._trails.pop(stream, None)
