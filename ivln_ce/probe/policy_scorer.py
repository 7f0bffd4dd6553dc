"""A learned policy as the probe driver's scorer (torch; imported only when ``eval.agent=policy``).

It is the evaluation's own machinery: ``PolicyAgent`` (the policy of ``policy.*``, its
per-stream memory, MAP-CMA's mapper) behind the ``ObservationPipeline`` (frozen encoders,
maps, masks), run on every observation of the teacher-forced walk as in evaluation. The
distribution is the softmax of the policy's logits at that step; the action it would have
chosen is discarded and the teacher's executed action becomes its previous action, as in
teacher-forced training. In the rollout after p_j the driver chooses the action from that
distribution (argmax or sampled) and tells it through ``record``: the policy's previous action
is then the one it chose.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from omegaconf import DictConfig

from ivln_ce.rollout.observations import ObservationPipeline
from ivln_ce.rollout.policy_agent import PolicyAgent
from ivln_ce.rollout.streams import StreamView


def image_keys(cfg: DictConfig, needs: set[str]) -> tuple[str, ...]:
    """The observation keys the workers must send for these needs (``semantic`` -> ``semantic12``)."""
    sensors = set(cfg.simulator.sensors)
    keys = [k for k in ("rgb", "depth") if k in needs and k in sensors]
    if "semantic" in needs and "semantic" in sensors:
        keys.append("semantic12")
    return tuple(keys)


class PolicyScorer:
    def __init__(self, cfg: DictConfig, vocab_size: int, device: str = "cpu", agent: PolicyAgent | None = None,
                 threads: int | None = None):
        if threads is not None:  # the cores the environment workers leave free (at least one), as in evaluation
            torch.set_num_threads(max(1, int(threads)))
        self.agent = agent if agent is not None else PolicyAgent.from_config(cfg, vocab_size, device=device)
        self.image_keys = image_keys(cfg, set(self.agent.image_needs))
        self.pipeline = ObservationPipeline(device, mapper=self.agent.mapper, image_keys=self.image_keys,
                                            depth_encoder=self.agent.depth_encoder, rgb_encoder=self.agent.rgb_encoder)

    @property
    def timings(self) -> dict[str, float]:
        return {**self.pipeline.timings, **self.agent.timings}

    def step(self, views: Sequence[StreamView], executed: Sequence[int | None],
             rollout: Sequence[int | None] | None = None) -> np.ndarray:
        rows = self.agent.rows(views)
        if len(rows) != len(views):
            raise RuntimeError("probe episodes are agent steps only; the policy must run on every observation")
        batch = self.pipeline(views, rows)
        self.agent.act(views, batch)
        logits = self.agent.policy.last_logits.float()
        probs = torch.softmax(logits, dim=1).cpu().numpy().astype(np.float64)
        forced = [(v.stream_id, a) for v, a in zip(views, executed) if a is not None]
        if forced:  # the teacher's action was executed; the agent's own choices come through ``record``
            self.agent.record([s for s, _ in forced], [a for _, a in forced])
        return probs

    def record(self, streams: Sequence[str], actions: Sequence[int]) -> None:
        """The actions the driver chose from this step's distributions (the rollout after p_j)."""
        self.agent.record(list(streams), list(actions))

    def drop(self, stream: str) -> None:
        self.agent.drop(stream)
        self.pipeline.drop(stream)
