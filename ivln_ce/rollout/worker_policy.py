"""A learned policy inside an environment worker (``eval.policy_process=workers``).

On a CPU a policy step costs the same per sample batched or not, so K workers that each run
their own copy at batch 1 use K cores, where one batched copy in the parent process uses
one process's threads for everyone. ``WorkerPolicy`` has the scripted-agent interface the
worker already drives (``reset_memory``, ``act`` on every observation, oracle steps
included) and runs the same ``ObservationPipeline`` and ``PolicyAgent`` as the parent would,
so it computes the same function; at batch 1 its numbers do not depend on how many
environments run beside it.
"""

from __future__ import annotations

from typing import Any

from ivln_ce.rollout.streams import StreamView


class WorkerPolicy:
    name = "policy"

    def __init__(self, env, config: dict[str, Any], vocab_size: int, threads: int = 1):
        import torch

        from ivln_ce.config import config_from_resolved
        from ivln_ce.rollout.observations import ObservationPipeline
        from ivln_ce.rollout.policy_agent import PolicyAgent

        torch.set_num_threads(max(1, int(threads)))
        cfg = config_from_resolved(config)
        self.env = env
        self.agent = PolicyAgent.from_config(cfg, vocab_size, device="cpu")
        keys = ["depth"] + (["rgb"] if "rgb" in self.agent.image_needs else [])
        if "semantic" in self.agent.image_needs:
            keys.append("semantic12")
        self.pipeline = ObservationPipeline("cpu", mapper=self.agent.mapper, image_keys=keys,
                                            depth_encoder=self.agent.depth_encoder, rgb_encoder=self.agent.rgb_encoder)
        self.stream: str | None = None
        self.tour_id: str | None = None
        self._count = 0

    @property
    def timings(self) -> dict[str, float]:
        return {**self.pipeline.timings, **self.agent.timings}

    def reset_memory(self, tour_start: bool, episode_start: bool, tour_id: str | None = None) -> None:
        if tour_start:
            if self.stream is not None:
                self.agent.drop(self.stream)
                self.pipeline.drop(self.stream)
            self._count += 1
            self.tour_id = str(tour_id)
            self.stream = f"w{self._count}:{self.tour_id}"

    def act(self, observations: dict[str, Any], info: dict[str, Any]) -> int:
        view = StreamView(self.stream, 0, 0, self.tour_id, self.env.episode.scan, observations, info)
        batch = self.pipeline([view], self.agent.rows([view]))
        return self.agent.act([view], batch)[0]
