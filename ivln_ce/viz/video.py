"""Episode videos: RGB | depth | egocentric map | top-down with the path so far, one frame per step.

The evaluator writes one video per episode (``videos_{label}_{split}/{tour}/{episode}.mp4``)
and the report links them. Videos are encoded by ffmpeg through imageio-ffmpeg (its wheel
ships an ffmpeg binary, so nothing else is installed) in codecs Chromium plays: H.264
(``libx264``, yuv420p, ``+faststart``) for ``.mp4``, VP9 (``libvpx-vp9``) for ``.webm``. OpenCV's
``mp4v`` (MPEG-4 part 2) is not used: browsers do not play it.

    with EpisodeVideo("ep.mp4", fps=10) as video:
        for obs in episode:
            video.add(obs["rgb"], obs["depth"], egocentric_image(occ, sem), trail(path, heading))

The panels of the first frame fix the layout; the file appears (atomically) on ``close``.
"""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np

from ivln_ce.scenes.layout import HouseLayout
from ivln_ce.viz.scenes import PlanFrame, depth_image, topdown_image

PANELS = ("rgb", "depth", "ego_map", "topdown")
CAPTIONS = {"rgb": "RGB", "depth": "depth", "ego_map": "egocentric map", "topdown": "top-down"}
CODECS = {
    ".mp4": ("libx264", ["-preset", "veryfast", "-crf", "23", "-movflags", "+faststart"]),
    ".webm": ("libvpx-vp9", ["-b:v", "0", "-crf", "34", "-deadline", "realtime", "-cpu-used", "8", "-row-mt", "1"]),
}
CAPTION_H = 18


def _as_rgb(name: str, img) -> np.ndarray:
    """uint8 (H, W, 3) from an RGB(A)/grey image, or a depth map in [0, 1] (viridis)."""
    a = np.asarray(img)
    if name == "depth" and a.dtype != np.uint8:
        return depth_image(a.reshape(a.shape[0], a.shape[1], 1).astype(np.float32))
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    if a.ndim != 3 or a.shape[2] not in (3, 4):
        raise ValueError(f"{name}: expected an (H, W, 3) image, got shape {a.shape}")
    if a.dtype != np.uint8:
        a = np.clip(a, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(a[:, :, :3])


class EpisodeVideo:
    """One episode's video; ``add`` a frame per step, ``close`` to finish the file.

    ``tile`` is the height of every panel in pixels (widths keep each panel's aspect ratio as
    seen in the first frame). Panels given in the first frame are the video's panels; a later
    frame may leave one out (it is drawn blank) but may not add a new one.
    """

    def __init__(self, path: str | Path, fps: float = 10.0, tile: int = 256, captions: bool = True):
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in CODECS:
            raise ValueError(f"{self.path}: video files must end in {sorted(CODECS)} (H.264 mp4 or VP9 webm, both play in browsers)")
        if fps <= 0 or tile < 16:
            raise ValueError(f"fps must be > 0 and tile >= 16 (got fps={fps}, tile={tile})")
        self.fps, self.tile, self.captions = float(fps), int(tile), captions
        self.frames = 0
        self._layout: list[tuple[str, int]] | None = None  # (panel, width)
        self._size: tuple[int, int] | None = None
        self._writer = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(f".{self.path.stem}.tmp{suffix}")

    # ------------------------------------------------------------------ composition

    def compose(self, rgb=None, depth=None, ego_map_rgb=None, topdown_rgb=None) -> np.ndarray:
        """The frame that ``add`` would write (uint8 (H, W, 3), even sizes)."""
        given = {k: v for k, v in zip(PANELS, (rgb, depth, ego_map_rgb, topdown_rgb)) if v is not None}
        images = {k: _as_rgb(k, v) for k, v in given.items()}
        if self._layout is None:
            if not images:
                raise ValueError("the first frame needs at least one panel (rgb, depth, ego_map_rgb or topdown_rgb)")
            self._layout = [(k, max(8, round(self.tile * images[k].shape[1] / images[k].shape[0]))) for k in PANELS if k in images]
            width = sum(w for _, w in self._layout) + 4 * (len(self._layout) - 1)
            height = self.tile + (CAPTION_H if self.captions else 0)
            self._size = (width + width % 2, height + height % 2)
        extra = set(images) - {k for k, _ in self._layout}
        if extra:
            raise ValueError(f"panel(s) {sorted(extra)} were not in the first frame; the layout is {[k for k, _ in self._layout]}")
        w_total, h_total = self._size
        frame = np.full((h_total, w_total, 3), 255, np.uint8)
        top = CAPTION_H if self.captions else 0
        x = 0
        for name, w in self._layout:
            if name in images:
                frame[top : top + self.tile, x : x + w] = cv2.resize(images[name], (w, self.tile), interpolation=cv2.INTER_AREA)
            else:
                frame[top : top + self.tile, x : x + w] = 200
            if self.captions:
                cv2.putText(frame, CAPTIONS[name], (x + 4, CAPTION_H - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
            x += w + 4
        return frame

    # ------------------------------------------------------------------ encoding

    def add(self, rgb=None, depth=None, ego_map_rgb=None, topdown_rgb=None) -> None:
        """Append one frame. ``depth`` may be float in [0, 1] ((H, W) or (H, W, 1)) or a coloured image."""
        frame = self.compose(rgb, depth, ego_map_rgb, topdown_rgb)
        if self._writer is None:
            import imageio_ffmpeg

            codec, params = CODECS[self.path.suffix.lower()]
            self._writer = imageio_ffmpeg.write_frames(
                str(self._tmp), self._size, fps=self.fps, codec=codec, pix_fmt_in="rgb24", pix_fmt_out="yuv420p",
                quality=None, macro_block_size=2, ffmpeg_log_level="error", output_params=params,
            )
            self._writer.send(None)
        self._writer.send(np.ascontiguousarray(frame))
        self.frames += 1

    def close(self) -> Path:
        """Finish the file and move it into place; returns its path."""
        if self._writer is None:
            raise ValueError(f"{self.path}: no frame was added")
        self._writer.close()
        self._writer = None
        os.replace(self._tmp, self.path)
        return self.path

    def abort(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # ffmpeg may already have failed; the partial file goes anyway
                pass
            self._writer = None
        if self._tmp.exists():
            self._tmp.unlink()

    def __enter__(self) -> "EpisodeVideo":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and self._writer is not None:
            self.close()
        else:
            self.abort()


class TopdownTrail:
    """The top-down panel: the house plan drawn once, then the path so far and the agent per frame.

    ``reference`` (green) and ``goal`` (red ring) are fixed for the episode; ``__call__`` draws the
    path walked so far (blue) and the agent (red arrow for ``heading``, radians, Habitat frame).
    """

    def __init__(self, layout: HouseLayout, reference=None, goal=None, px_per_m: float = 30.0):
        self.frame = PlanFrame(layout, px_per_m)
        self.base = topdown_image(layout, None, px_per_m)
        if reference is not None and len(reference) > 1:
            pts = np.array([self.frame(p[0], p[2]) for p in np.asarray(reference)], np.int32)
            cv2.polylines(self.base, [pts], False, (40, 160, 40), 3, cv2.LINE_AA)
        if goal is not None:
            cv2.circle(self.base, self.frame(goal[0], goal[2]), 7, (220, 30, 30), 2, cv2.LINE_AA)

    def __call__(self, path, heading: float | None = None) -> np.ndarray:
        img = self.base.copy()
        path = np.asarray(path, dtype=float).reshape(-1, 3)
        if len(path) > 1:
            pts = np.array([self.frame(p[0], p[2]) for p in path], np.int32)
            cv2.polylines(img, [pts], False, (30, 90, 220), 2, cv2.LINE_AA)
        if len(path):
            x, z = path[-1][0], path[-1][2]
            c = self.frame(x, z)
            cv2.circle(img, c, 5, (220, 0, 0), -1, cv2.LINE_AA)
            if heading is not None:
                tip = self.frame(x - 0.5 * np.sin(heading), z - 0.5 * np.cos(heading))
                cv2.arrowedLine(img, c, tip, (220, 0, 0), 2, cv2.LINE_AA, tipLength=0.4)
        return img
