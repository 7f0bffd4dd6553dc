"""A learned CMA-family policy acting on the engine's batched views (main process).

``PolicyAgent`` holds the policy, its per-stream memory (``PolicyState``: recurrent state,
encoded instruction, previous executed action, keyed by stream id) and, for MAP-CMA, the
mapper. Each tick ``act(views, batch)`` takes the observation pipeline's batch (frozen
features, maps, masks), runs one batched policy step for every active stream (oracle steps
included: tour memories run through them, SPEC §3.5) and returns the actions; the executed
action is recorded as the next step's previous action (``record``), which a DAgger collector
overrides with the action it actually executed.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import DictConfig

from ivln_ce.config import PolicyName
from ivln_ce.models.precision import autocast
from ivln_ce.rollout.streams import StreamView

LATENT = {PolicyName.cma, PolicyName.tour_cma, PolicyName.pool_cma, PolicyName.pool_end_cma}


def tour_key(tour_id: str) -> int:
    """A seed per tour id: the id itself when numeric, else 63 bits of its BLAKE2b digest
    (distinct ids, anagrams included, must not share coin flips and samples)."""
    if tour_id.isdigit():
        return int(tour_id)
    return int.from_bytes(hashlib.blake2b(tour_id.encode(), digest_size=8).digest(), "little") >> 1


def make_mapper(cfg: DictConfig, device: str | torch.device = "cpu"):
    """The mapper of ``mapping.*`` for the rollout (semantics from the simulator or RedNet)."""
    from ivln_ce.mapping.known import KnownMaps
    from ivln_ce.mapping.mapper import Mapper
    from ivln_ce.models.factory import load_segmenter

    known = KnownMaps(cfg.mapping.known_maps_dir, known_map_source(cfg)) if cfg.mapping.mode.value == "known" else None
    segmenter = load_segmenter(cfg.mapping, device)
    return Mapper(cfg.mapping, math.radians(cfg.simulator.depth.hfov), cfg.simulator.max_depth, cfg.simulator.sensor_height,
                  segmenter=segmenter, known_maps=known, device=device)


def known_map_source(cfg: DictConfig) -> str:
    """The known-map folder matching the semantics (SPEC §1.8): GT or RedNet-predicted labels."""
    return "gt_semantics" if cfg.mapping.semantics.value == "gt" else "predicted_semantics"


def known_map_files(cfg: DictConfig, scans) -> dict[str, Path]:
    """The known-map file of each scan (``known_map:{scan}`` -> path), as fingerprints name them."""
    root = Path(cfg.mapping.known_maps_dir) / known_map_source(cfg)
    return {f"known_map:{scan}": root / f"{scan}.npz" for scan in scans}


def required_sensors(cfg: DictConfig) -> set[str]:
    """Simulator sensors a policy needs (SPEC §2.4 sensor sets)."""
    name = cfg.policy.name
    if name in LATENT:
        return {"rgb", "depth"}
    if name == PolicyName.map_cma:
        if cfg.mapping.mode.value == "known":
            return {"depth"}
        return {"depth", "semantic"} if cfg.mapping.semantics.value == "gt" else {"depth", "rgb"}
    return set()


class PolicyAgent:
    def __init__(self, policy, device: str | torch.device = "cpu", mapper=None, deterministic: bool = True, seed: int = 0,
                 precision: str = "fp32"):
        from ivln_ce.models.cma import PolicyState

        self.device = torch.device(device)
        self.precision = getattr(precision, "value", precision)
        self.policy = policy.to(self.device).eval()
        self.state = PolicyState()
        self.mapper = mapper
        self.deterministic = deterministic
        self.seed = seed
        self.timings: dict[str, float] = {}
        net = policy.net
        self.depth_encoder = net.depth_encoder
        self.rgb_encoder = getattr(net, "rgb_encoder", None)
        self.uses_maps = hasattr(net, "map_encoder")
        self.image_needs: set[str] = {"depth"}
        if self.rgb_encoder is not None:
            self.image_needs.add("rgb")
        self._generators: dict[str, torch.Generator] = {}
        self.load_reports: list = []

    @classmethod
    def from_config(cls, cfg: DictConfig, vocab_size: int, device: str | torch.device = "cpu") -> "PolicyAgent":
        from ivln_ce.models.factory import build_policy

        missing = required_sensors(cfg) - set(cfg.simulator.sensors)
        if missing:
            raise ValueError(f"policy.name={cfg.policy.name.value} needs simulator.sensors to include {sorted(missing)}")
        policy, reports = build_policy(cfg.policy, vocab_size, cfg.train, device, seed=int(cfg.seed))
        mapper = make_mapper(cfg, device) if cfg.policy.name == PolicyName.map_cma else None
        agent = cls(policy, device, mapper, bool(cfg.eval.deterministic), int(cfg.seed), cfg.eval.precision)
        agent.load_reports = reports
        if mapper is not None:
            if cfg.mapping.mode.value != "known":
                agent.image_needs.add("semantic" if cfg.mapping.semantics.value == "gt" else "rgb")
        return agent

    @property
    def every_step(self) -> bool:
        """Whether the policy must run on oracle steps too: tour memories (TourCMA's GRUs,
        PoolCMA's M) integrate them. CMA and MAP-CMA reset their state at the next agent
        step (agent mask 0), so their outputs on oracle steps are discarded unread."""
        return getattr(self.policy.net, "variant", "cma") in ("tourcma", "poolcma", "poolendcma")

    def rows(self, views: Sequence[StreamView]) -> list[int]:
        """The rows of a tick the policy runs on."""
        if self.every_step:
            return list(range(len(views)))
        return [i for i, v in enumerate(views) if v.info["produce_action"]]

    def observations(self, batch: dict[str, Any], rows: list[int]) -> dict[str, torch.Tensor]:
        """The policy's inputs for ``rows`` (the features already hold exactly those rows)."""
        index = torch.tensor(rows, device=self.device)
        obs = {"instruction": batch["instruction"].index_select(0, index), "depth_features": batch["depth_features"]}
        if self.rgb_encoder is not None:
            obs["rgb_features"] = batch["rgb_features"]
        if self.uses_maps:
            obs["map"] = batch["map"].index_select(0, index)
        return obs

    def _generator(self, stream: str) -> torch.Generator:
        """Per-stream sampling generator seeded by (run seed, tour id): results do not depend
        on which environment ran the tour or what ran beside it."""
        g = self._generators.get(stream)
        if g is None:
            key = tour_key(stream.split(":", 1)[1])
            g = torch.Generator(device="cpu").manual_seed((self.seed * 1_000_003 + key) % (1 << 64))
            self._generators[stream] = g
        return g

    @torch.no_grad()
    def act(self, views: Sequence[StreamView], batch: dict[str, Any]) -> list[int]:
        """Actions for every view (0 where the policy did not run: oracle steps, ignored)."""
        t = time.perf_counter()
        rows = batch["feature_rows"]
        out = [0] * len(views)
        if rows:
            streams = [batch["streams"][i] for i in rows]
            index = torch.tensor(rows, device=self.device)
            with autocast(self.precision, self.device):
                actions, _, _ = self.policy.act(self.observations(batch, rows), self.state, streams,
                                                batch["episode_start"].index_select(0, index),
                                                batch["tour_start"].index_select(0, index), deterministic=True)
            if not self.deterministic:
                probs = torch.softmax(self.policy.last_logits.float(), dim=1).cpu()
                actions = torch.stack([torch.multinomial(probs[i], 1, generator=self._generator(s))[0] for i, s in enumerate(streams)])
            chosen = [int(a) for a in actions.cpu().tolist()]
            self.record(streams, chosen)
            for i, a in zip(rows, chosen):
                out[i] = a
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.timings["policy"] = self.timings.get("policy", 0.0) + 1e3 * (time.perf_counter() - t)
        return out

    def record(self, streams: Sequence[str], executed: Sequence[int]) -> None:
        """The actions the environments executed: the next step's previous-action input."""
        self.state.record_actions(list(streams), list(executed))

    def drop(self, stream: str) -> None:
        self.state.drop(stream)
        self._generators.pop(stream, None)
