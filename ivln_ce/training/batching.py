"""Episode batching and collate for episodic training (SPEC §9.3-9.4).

Two batch orders over a store's N episodes, both deterministic in (seed, round, epoch):

* ``official_batches`` (T12): three loader shares of contiguous indices; in each, blocks of
  ``batch_size * 100`` indices in shuffled order, read in buffers of that size, each buffer
  randomly permuted (the official length sort has a constant key), cut into batches, the
  share's own last incomplete batch dropped; the shares' batches interleaved. Batches mix
  episode lengths freely, so padding is large.
* ``bucketed_batches`` (fixed): one shuffled stream; within each buffer the episodes are sorted
  by true length (random tie-breaks), cut into batches, the batches shuffled; nothing dropped.

``collate`` pads a list of stored episodes to the longest one (or to ``pad_to``: under data
parallelism a rank pads its slice to the global batch's longest episode, because padded steps
enter MAP-CMA's BatchNorm statistics, the T1 loss and the T2 carried state), time-major: observations are
padded with 1.0 (the official fill, which the T1 progress loss then sees), actions and
weights with 0; the masks are 1 except at t = 0, so every episode starts from a zero state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ivln_ce.models.losses import inflection_weights
from ivln_ce.training.store import Episode

BUFFER_FACTOR = 100
OFFICIAL_LOADER_SHARES = 3
PAD_VALUE = 1.0


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([seed, *keys])


def official_batches(n: int, batch_size: int, seed: int, round_: int, epoch: int) -> list[list[int]]:
    """The official loader's batch order (T12), see the module docstring."""
    rng = _rng(seed, round_, epoch, 12)
    buffer = batch_size * BUFFER_FACTOR
    share = -(-n // OFFICIAL_LOADER_SHARES)
    per_share: list[list[list[int]]] = []
    for w in range(OFFICIAL_LOADER_SHARES):
        lo, hi = w * share, min((w + 1) * share, n)
        blocks = [list(range(s, min(s + buffer, hi))) for s in range(lo, hi, buffer)]
        order = rng.permutation(len(blocks)) if blocks else []
        stream = [i for b in order for i in blocks[b]]
        batches = []
        for s in range(0, len(stream), buffer):
            buf = [stream[s + j] for j in rng.permutation(len(stream[s:s + buffer]))]
            batches += [buf[k:k + batch_size] for k in range(0, len(buf), batch_size)]
        if batches and len(batches[-1]) < batch_size:
            batches.pop()  # each loader process drops its own incomplete final batch
        per_share.append(batches)
    out = []
    for k in range(max((len(b) for b in per_share), default=0)):
        for b in per_share:
            if k < len(b):
                out.append(b[k])
    return out


def bucketed_batches(lengths: Sequence[int], batch_size: int, seed: int, round_: int, epoch: int) -> list[list[int]]:
    """Length-bucketed batches (the fixed profile), see the module docstring."""
    rng = _rng(seed, round_, epoch, 1)
    n = len(lengths)
    stream = rng.permutation(n)
    buffer = batch_size * BUFFER_FACTOR
    batches = []
    for s in range(0, n, buffer):
        buf = stream[s:s + buffer]
        ties = rng.random(len(buf))
        buf = buf[np.lexsort((ties, np.asarray(lengths)[buf]))]
        batches += [buf[k:k + batch_size].tolist() for k in range(0, len(buf), batch_size)]
    return [batches[k] for k in rng.permutation(len(batches))]


@dataclass
class Batch:
    """Time-major (T, B) training inputs of a list of episodes."""

    observations: dict[str, torch.Tensor]  # instruction (1, B, L); per-step fields (T, B, ...)
    expert: torch.Tensor  # (T, B) long
    prev_actions: torch.Tensor  # (T, B) long: -1 at t = 0 (none), 0 on padding (as officially)
    masks: torch.Tensor  # (T, B) float, 0 at t = 0
    valid: torch.Tensor  # (T, B) bool
    weights: torch.Tensor  # (T, B) inflection weights, 0 on padding
    progress: torch.Tensor  # (T, B) targets, padded with 1.0
    lengths: torch.Tensor  # (B,)
    meta: list[dict]

    def to(self, device) -> "Batch":
        return Batch({k: v.to(device, non_blocking=True) for k, v in self.observations.items()},
                     *(t.to(device, non_blocking=True) for t in (self.expert, self.prev_actions, self.masks, self.valid, self.weights, self.progress, self.lengths)),
                     self.meta)


#: per-step store fields that are observations of the policy (padded with PAD_VALUE)
OBSERVATION_FIELDS = ("depth_features", "rgb_features", "occupancy_map", "semantic_map")


def collate(episodes: Sequence[Episode], inflection: float = 3.2, pad_to: int | None = None) -> Batch:
    T = max(max(e.length for e in episodes), int(pad_to or 0))
    B = len(episodes)
    obs: dict[str, torch.Tensor] = {}
    for name in OBSERVATION_FIELDS:
        if name not in episodes[0].steps:
            continue
        first = episodes[0].steps[name]
        dtype = np.float32 if first.dtype.kind == "f" else first.dtype
        arr = np.full((T, B, *first.shape[1:]), PAD_VALUE, dtype=dtype)
        for b, e in enumerate(episodes):
            arr[: e.length, b] = e.steps[name]
        obs[name] = torch.from_numpy(arr)
    # (1, B, L): the policy's sequence forward reads the instruction at t = 0 only
    obs["instruction"] = torch.from_numpy(np.stack([np.asarray(e.constants["instruction"], dtype=np.int64) for e in episodes]))[None]
    expert = np.zeros((T, B), np.int64)
    prev = np.zeros((T, B), np.int64)  # padding 0, as officially (SPEC §9.3); it reaches T2's carried state
    progress = np.full((T, B), PAD_VALUE, np.float32)
    valid = np.zeros((T, B), bool)
    for b, e in enumerate(episodes):
        L = e.length
        expert[:L, b] = e.steps["oracle_actions"]
        prev[:L, b] = e.steps["prev_actions"]
        progress[:L, b] = np.asarray(e.steps["progress"], dtype=np.float32).reshape(L)
        valid[:L, b] = True
    masks = np.ones((T, B), np.float32)
    masks[0] = 0.0
    expert_t, valid_t = torch.from_numpy(expert), torch.from_numpy(valid)
    return Batch(obs, expert_t, torch.from_numpy(prev), torch.from_numpy(masks), valid_t,
                 inflection_weights(expert_t, valid_t, inflection), torch.from_numpy(progress),
                 torch.tensor([e.length for e in episodes]), [e.meta for e in episodes])
