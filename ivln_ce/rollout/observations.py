"""The observation pipeline: worker observations -> batched tensors, maps and frozen features.

Runs in the main process on the policy's device, once per engine tick:

* images (``depth`` (N, H, W, 1) in [0, 1] with no-hit 0, ``rgb`` (N, H, W, 3) uint8,
  ``semantic12``), ``instruction`` token ids, ``progress``, the base ``position`` and
  ``heading`` are stacked into tensors (SPEC §2.3-2.4);
* the memory signals of every stream become masks: ``episode_start`` (agent mask 0) and
  ``tour_start`` (tour mask 0), straight from the environment's infos (SPEC §3.6);
* with maps, the mapper transform runs in the loop on every observation, oracle steps
  included, with its mode's resets (episodic / iterative / known; SPEC §6.11) and semantics
  from the simulator or a RedNet segmenter on the same device; state keyed by stream id;
* the frozen encoders (DD-PPO depth, the RGB ResNet trunk) run once per frame and their
  outputs are handed to the policy as ``depth_features`` / ``rgb_features`` (what a trainer
  stores, SPEC §1.10).

Each stage is timed (``timings``, ms summed) for the engine's latency breakdown.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Sequence

import numpy as np
import torch

from ivln_ce.rollout.streams import StreamView


class ObservationPipeline:
    def __init__(
        self,
        device: str | torch.device = "cpu",
        mapper=None,
        depth_encoder=None,
        rgb_encoder=None,
        image_keys: Sequence[str] = (),
    ):
        self.device = torch.device(device)
        self.mapper = mapper
        self.depth_encoder = depth_encoder
        self.rgb_encoder = rgb_encoder
        self.image_keys = tuple(image_keys)
        self.timings: dict[str, float] = {}

    @contextmanager
    def _timed(self, name: str):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t = time.perf_counter()
        yield
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.timings[name] = self.timings.get(name, 0.0) + 1e3 * (time.perf_counter() - t)

    def _stack(self, views: Sequence[StreamView], key: str, dtype=None) -> torch.Tensor:
        arr = np.stack([np.asarray(v.obs[key]) for v in views])
        t = torch.from_numpy(arr)
        if dtype is not None:
            t = t.to(dtype)
        return t.to(self.device, non_blocking=True)

    def __call__(self, views: Sequence[StreamView], feature_rows: Sequence[int] | None = None) -> dict[str, Any]:
        """Batch the views; returns tensors, masks, maps and features (what exists).

        The mapper sees every view (maps integrate oracle walks); the frozen encoders run only
        on ``feature_rows`` (all rows when None): ``depth_features``/``rgb_features`` then hold
        those rows, in that order, and ``feature_rows`` says which they are."""
        out: dict[str, Any] = {"streams": [v.stream_id for v in views]}
        with self._timed("batch"):
            out["episode_start"] = torch.tensor([bool(v.info["episode_memory_reset"]) for v in views], device=self.device)
            out["tour_start"] = torch.tensor([bool(v.info["tour_start"]) for v in views], device=self.device)
            out["instruction"] = self._stack(views, "instruction", torch.long)
            out["progress"] = self._stack(views, "progress", torch.float32)
            out["position"] = self._stack(views, "position", torch.float32)
            out["heading"] = self._stack(views, "heading", torch.float32).reshape(-1)
            for key in self.image_keys:
                if key in views[0].obs:
                    out[key] = self._stack(views, key)
        if self.mapper is not None:
            with self._timed("map"):
                maps = self.mapper(
                    out["streams"],
                    {k: out[k] for k in ("depth", "position", "heading", "semantic12", "rgb") if k in out},
                    out["episode_start"], out["tour_start"], scans=[v.scan for v in views],
                )
            out.update(maps)
        rows = list(range(len(views))) if feature_rows is None else list(feature_rows)
        out["feature_rows"] = rows
        if (self.depth_encoder is not None or self.rgb_encoder is not None) and rows:
            index = torch.tensor(rows, device=self.device) if len(rows) != len(views) else None
            pick = (lambda t: t) if index is None else (lambda t: t.index_select(0, index))
            out.update(self.encode(pick(out["depth"]) if self.depth_encoder is not None else None,
                                   pick(out["rgb"]) if self.rgb_encoder is not None else None))
        return out

    def encode(self, depth: torch.Tensor | None, rgb: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The frozen encoders' features of a batch of frames (``depth`` (N, H, W, 1),
        ``rgb`` (N, H, W, 3) uint8, on this device): ``depth_features`` / ``rgb_features``."""
        out = {}
        with self._timed("encoders"), torch.no_grad():
            if depth is not None:
                out["depth_features"] = self.depth_encoder.features(depth.float())
            if rgb is not None:
                out["rgb_features"] = self.rgb_encoder.features(rgb)
        return out

    def drop(self, stream: str) -> None:
        if self.mapper is not None:
            self.mapper.drop(stream)


def maps_per_view(batch: dict[str, Any]) -> list[dict[str, np.ndarray] | None]:
    """The batch's egocentric maps split per stream (numpy), or Nones without maps."""
    n = len(batch["streams"])
    if "occupancy_map" not in batch:
        return [None] * n
    occ = batch["occupancy_map"].cpu().numpy()
    sem = batch["semantic_map"].cpu().numpy()
    return [{"occupancy_map": occ[i], "semantic_map": sem[i]} for i in range(n)]

