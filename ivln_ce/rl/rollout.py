"""On-policy rollouts for reinforcement fine-tuning, on the rollout engine.

``RLDriver.decide`` is the engine's per-tick decision, as evaluation's ``PolicyAgent`` and
DAgger's ``CollectDriver`` are: the observation pipeline batches the views (frozen features,
maps with their mode's resets, the agent and tour masks), the policy runs one batched step on
its rows (every row for tour-memory models, whose memory integrates oracle walks; the agent
rows otherwise) with its per-stream state, and at each agent step an action is *sampled* from
the policy with a generator seeded by (seed, update, tour id), so a rollout does not depend
on the number of environments. Oracle phases, teleports and persistent maps are the
environment's and the pipeline's, exactly as in evaluation.

Per agent step the driver keeps what the update needs to replay the step: the policy's inputs
(features, maps), the previous action and both masks it saw, the sampled action, its
log-probability and the value estimate. Per episode it keeps the instruction and the
recurrent state before its first agent step (``h0``: in iterative mode TourCMA's GRUs and
PoolCMA's memory carry over from earlier episodes and oracle walks; the update replays each
episode from there). When the episode's agent phase ends, its rewards are computed from the
agent-done info (agent path, goal distances) and the episode's reference (``rl.rewards``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ivln_ce.data.episodes import Episode as DataEpisode
from ivln_ce.data.episodes import ReferenceTrajectory
from ivln_ce.rl.rewards import EpisodeOutcome, EpisodeRewards, RewardSpec, episode_rewards
from ivln_ce.rollout.policy_agent import tour_key
from ivln_ce.rollout.streams import StreamView

#: models whose memory spans a tour: the policy runs on oracle steps too
TOUR_MEMORY_VARIANTS = ("tourcma", "poolcma", "poolendcma")


class RolloutError(RuntimeError):
    """The environment's account of an episode disagrees with what the driver recorded."""


@dataclass
class EpisodeRollout:
    """One episode's agent steps, as sampled."""

    tour_id: str
    episode_id: str
    order: tuple[int, int]  # (the tour's position in the update's plan, the episode's in the tour)
    instruction: np.ndarray  # (L,) token ids
    h0: torch.Tensor  # (layers, hidden): the recurrent state before the first agent step
    steps: dict[str, np.ndarray]  # per agent step, stacked along dim 0 (see ``RLDriver``)
    rewards: np.ndarray  # (T,)
    outcome: EpisodeRewards

    @property
    def length(self) -> int:
        return len(self.rewards)


def stream_generator(seed: int, update: int, tour_id: str) -> torch.Generator:
    """The sampling generator of a tour in an update: the same whichever worker runs it."""
    state = np.random.SeedSequence([int(seed), int(update), tour_key(tour_id), 29]).generate_state(1, np.uint64)[0]
    return torch.Generator(device="cpu").manual_seed(int(state) >> 1)


def reference_points(episode: DataEpisode, references: dict[str, ReferenceTrajectory]) -> np.ndarray:
    """The reference the environment scores nDTW and CLS against: the ground-truth locations
    when the split has them, else the episode's reference path."""
    ref = references.get(episode.episode_id)
    return np.asarray(ref.locations if ref is not None else episode.reference_path, dtype=np.float64)


class RLDriver:
    """``decide`` / ``final`` / ``drop`` for the engine; finished episodes in ``episodes``."""

    def __init__(self, policy, value_head, pipeline, spec: RewardSpec, episodes: dict[str, DataEpisode],
                 references: dict[str, ReferenceTrajectory], seed: int, update: int, order_of: dict[str, int]):
        from ivln_ce.models.cma import PolicyState

        self.policy, self.value_head, self.pipeline = policy, value_head, pipeline
        self.spec = spec
        self.data_episodes, self.references = episodes, references
        self.seed, self.update = seed, update
        self.order_of = order_of
        self.state = PolicyState()
        self.buffers: dict[str, dict[str, Any]] = {}
        self.positions: dict[str, int] = {}
        self.generators: dict[str, torch.Generator] = {}
        self.episodes: list[EpisodeRollout] = []
        self.every_step = getattr(policy.net, "variant", "cma") in TOUR_MEMORY_VARIANTS
        self.rgb_needed = getattr(policy.net, "rgb_encoder", None) is not None
        self.maps_needed = hasattr(policy.net, "map_encoder")

    def _generator(self, view: StreamView) -> torch.Generator:
        g = self.generators.get(view.stream_id)
        if g is None:
            g = self.generators[view.stream_id] = stream_generator(self.seed, self.update, view.tour_id)
        return g

    def _buffer(self, view: StreamView) -> dict[str, Any]:
        """The stream's buffer for its current episode (a new one when the episode changed)."""
        buf = self.buffers.get(view.stream_id)
        eid = str(view.info["episode_id"])
        if buf is None or buf["episode_id"] != eid:
            position = self.positions.get(view.stream_id, -1) + 1
            self.positions[view.stream_id] = position
            buf = {"episode_id": eid, "tour_id": view.tour_id, "position": position, "steps": [], "h0": None,
                   "instruction": np.asarray(view.obs["instruction"], dtype=np.int64)}
            self.buffers[view.stream_id] = buf
        return buf

    @torch.no_grad()
    def decide(self, views: Sequence[StreamView]) -> list[int]:
        for v in views:
            if "metrics" in v.info:
                self._finish(v)
        agent_rows = [i for i, v in enumerate(views) if v.info["produce_action"]]
        rows = list(range(len(views))) if self.every_step else agent_rows
        actions = [0] * len(views)
        if not rows:
            return actions
        batch = self.pipeline(views, rows)
        device = batch["instruction"].device
        index = torch.tensor(rows, device=device)
        streams = [batch["streams"][i] for i in rows]
        layers = self.policy.num_recurrent_layers
        buffers = {}
        for i in agent_rows:
            buf = buffers[i] = self._buffer(views[i])
            if buf["h0"] is None:  # the episode's first agent step: its replay starts from this state
                h = self.state.hidden.get(views[i].stream_id)
                buf["h0"] = (h if h is not None else torch.zeros(layers, 512, device=device)).detach().cpu().clone()
        prev = {s: self.state.prev_action.get(s, -1) for s in streams}
        obs = {"instruction": batch["instruction"].index_select(0, index), "depth_features": batch["depth_features"]}
        if self.rgb_needed:
            obs["rgb_features"] = batch["rgb_features"]
        if self.maps_needed:
            obs["map"] = batch["map"].index_select(0, index)
        episode_start = batch["episode_start"].index_select(0, index)
        tour_start = batch["tour_start"].index_select(0, index)
        self.policy.act(obs, self.state, streams, episode_start, tour_start, deterministic=True)
        logp_all = torch.log_softmax(self.policy.last_logits.float(), dim=1).cpu()
        values = self.value_head(self.policy.last_features).float().reshape(-1).cpu()
        depth = batch["depth_features"].float().cpu().numpy()
        rgb = batch["rgb_features"].float().cpu().numpy() if self.rgb_needed else None
        occ = batch["occupancy_map"].cpu().numpy() if self.maps_needed else None
        sem = batch["semantic_map"].cpu().numpy() if self.maps_needed else None
        executed = []
        for n, i in enumerate(rows):
            if i not in buffers:  # an oracle step of a tour-memory model: the action is ignored
                executed.append(0)
                continue
            v = views[i]
            a = int(torch.multinomial(logp_all[n].exp(), 1, generator=self._generator(v))[0])
            step = {"depth_features": depth[n], "prev_actions": np.int64(prev[v.stream_id]),
                    "agent_masks": np.float32(not bool(episode_start[n])), "tour_masks": np.float32(not bool(tour_start[n])),
                    "actions": np.int64(a), "logp": np.float32(logp_all[n, a]), "values": np.float32(values[n])}
            if rgb is not None:
                step["rgb_features"] = rgb[n]
            if occ is not None:
                step["occupancy_map"], step["semantic_map"] = occ[i].astype(np.uint8), sem[i].astype(np.uint8)
            buffers[i]["steps"].append(step)
            actions[i] = a
            executed.append(a)
        self.state.record_actions(streams, executed)
        return actions

    def _finish(self, view: StreamView) -> None:
        """The agent phase of ``metrics_episode_id`` ended at this view: compute its rewards."""
        buf = self.buffers.pop(view.stream_id, None)
        eid = str(view.info["metrics_episode_id"])
        if buf is None or buf["episode_id"] != eid:
            raise RolloutError(f"tour {view.tour_id}: episode {eid} ended without recorded agent steps")
        steps = buf["steps"]
        info = view.info
        path, distances = info.get("agent_path"), info.get("goal_distances")
        if path is None or distances is None:
            raise RolloutError(f"tour {view.tour_id}, episode {eid}: the agent-done info has no agent_path / goal_distances")
        if len(path) != len(steps) + 1:
            raise RolloutError(f"tour {view.tour_id}, episode {eid}: {len(steps)} recorded agent steps but an agent path of "
                               f"{len(path)} points")
        episode = self.data_episodes[eid]
        outcome = EpisodeOutcome(np.asarray(path), np.asarray(distances), reference_points(episode, self.references),
                                 stopped=int(steps[-1]["actions"]) == 0)
        rewards = episode_rewards(outcome, self.spec)
        fields = {k: np.stack([s[k] for s in steps]) for k in steps[0]}
        self.episodes.append(EpisodeRollout(view.tour_id, eid, (self.order_of.get(view.tour_id, 0), buf["position"]),
                                            buf["instruction"], buf["h0"], fields, rewards.rewards, rewards))

    def final(self, view: StreamView) -> None:
        if "metrics" in view.info:
            self._finish(view)

    def drop(self, stream: str) -> None:
        self.state.drop(stream)
        self.buffers.pop(stream, None)
        self.positions.pop(stream, None)
        self.generators.pop(stream, None)
        self.pipeline.drop(stream)

    def sorted_episodes(self) -> list[EpisodeRollout]:
        """The rollout's episodes in canonical order (plan position, position in the tour)."""
        return sorted(self.episodes, key=lambda e: e.order)
