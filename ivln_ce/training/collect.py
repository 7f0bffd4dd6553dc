"""DAgger / teacher-forcing collection on the rollout engine (SPEC §9.2, §9.5, §9.6).

Collection drives the same engine as evaluation, with an expert override: at every agent
step, independently per stream, the expert's action (the ``shortest_path_sensor``) is
executed with probability beta, otherwise the policy's *sampled* action. What is stored per
agent step (``produce_action``; oracle steps are never stored): the frozen encoders'
features (``depth_features``, ``rgb_features`` for the latent models), the egocentric maps
for MAP-CMA (``occupancy_map``, ``semantic_map``, built by the mapper with its mode's resets,
oracle walks included in iterative mode), ``progress``, the expert label ``oracle_actions``
(always the expert's, whatever was executed) and ``prev_actions`` (the action executed at
the previous agent step; -1 at t = 0, where the mask forces the "start" embedding). An
episode is written when its agent phase ends.

With ``train.store_observations=false`` collection stores only the actions of every step
(executed, expert label, previous; no pipeline runs unless the policy acts), and
``replay_round`` re-renders the observations afterwards: the same engine drives the same
tours with the stored executed actions, which determine the whole tour (the oracle walks
included) because the simulator and the follower are deterministic. The replay checks every
re-computed expert label against the stored one, so a replay that diverged (other scenes,
another simulator) fails loudly instead of training on other data.

Rounds are planned deterministically: ``plan_round`` shuffles the items with (seed, round)
and takes whole tours (or episodes) until ``update_size`` episodes are covered, and every
stream samples and flips its coins from generators seeded by (seed, round, tour), so the
collected set does not depend on the number of environments or ranks (with the fixed
profile's eval-mode collection). Each episode's ``order`` key places it canonically.

Teacher forcing (beta = 1, no T3: the policy never runs) needs no features to decide, so with
``train.deferred_encoding`` (the default) the frozen encoders see each episode's frames in
batches of ``ENCODE_CHUNK`` as they accumulate, and the rest when it ends, instead of the few
frames of every tick: a CPU encodes a batch of 64 frames several times faster per frame than
one or two. A frame's features then depend only on its episode (not on which streams shared
its tick); they equal the per-tick path's within rounding.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ivln_ce.data.episodes import Episode as DataEpisode
from ivln_ce.data.tours import Tour
from ivln_ce.env.tour_env import TourItem
from ivln_ce.rollout.engine import RolloutEngine
from ivln_ce.rollout.streams import StreamView
from ivln_ce.rollout.policy_agent import tour_key
from ivln_ce.training.store import Episode, TrajectoryWriter

#: frames per frozen-encoder call in deferred teacher-forcing collection
ENCODE_CHUNK = 64


def beta_for_round(p: float, k: int, warm_started: bool) -> float:
    """beta_k = p^k; officially p^(k+1) when training starts from a loaded checkpoint (T6)."""
    return float(p) ** (k + 1 if warm_started else k)


def episodic_items(episodes: Sequence[DataEpisode]) -> list[TourItem]:
    """Every episode as its own one-episode tour: the episodic runner."""
    return [TourItem(Tour(f"ep{e.episode_id}", e.scan, (e.episode_id,)), [e]) for e in episodes]


def chained_items(episodes: Sequence[DataEpisode], seed: int, round_: int, chains: int = 1, size: int = 0) -> list[TourItem]:
    """Defect P6 (official iterative-maps fine-tuning): the split's episodes without tours,
    shuffled and grouped by scene, run as long chains through the iterative runner (one per
    collection worker, as the official workers each iterate on their own), so the oracle walks
    between unrelated episodes (across scene switches) and the map is cleared only at the start
    of the round. ``size`` > 0 caps the round at that many episodes (the official update size),
    shared evenly by the chains."""
    rng = np.random.default_rng([seed, round_, 6])
    by_scan: dict[str, list[DataEpisode]] = {}
    for e in episodes:
        by_scan.setdefault(e.scan, []).append(e)
    scans = list(by_scan)
    rng.shuffle(scans)
    order = []
    for s in scans:
        eps = by_scan[s]
        order += [eps[i] for i in rng.permutation(len(eps))]
    total = min(size, len(order)) if size > 0 else len(order)
    chains = max(1, min(int(chains), total))
    per = math.ceil(total / chains) if total else 0
    out = []
    for c in range(chains):
        chain = order[c * per:min((c + 1) * per, total)]
        if chain:
            out.append(TourItem(Tour(f"chain{round_}.{c}", chain[0].scan, tuple(e.episode_id for e in chain)), chain))
    return out


def p6_applies(policy_name: str, map_mode: str, itmaps_ft_on_tours: bool, p: float) -> bool:
    """Defect P6 concerns DAgger fine-tuning (p < 1) of iterative-maps MAP-CMA under
    ``train.itmaps_ft_on_tours=false``; teacher forcing collects tours in both profiles."""
    return policy_name == "map_cma" and map_mode == "iterative" and not itmaps_ft_on_tours and p < 1.0


def plan_round(items: Sequence[TourItem], update_size: int, seed: int, round_: int, shuffle: bool = True) -> list[int]:
    """Indices of the items collected in round ``round_``: a seeded shuffle, then whole items
    until ``update_size`` episodes are covered (0 = all)."""
    order = list(range(len(items)))
    if shuffle:
        order = [int(i) for i in np.random.default_rng([seed, round_, 9]).permutation(len(items))]
    if update_size <= 0:
        return order
    out, total = [], 0
    for i in order:
        if total >= update_size:
            break
        out.append(i)
        total += len(items[i].episodes)
    return out


def fp16_tokens(tokens: np.ndarray) -> np.ndarray:
    """Token ids after a round trip through float16, as the official fp16 store option stores
    them: exact up to 2048, rounded to a multiple of 2 (4, ...) above."""
    return np.asarray(tokens).astype(np.float16).astype(np.int64)


ACTION_FIELDS = ("executed_actions", "oracle_actions", "prev_actions")


class ReplayError(RuntimeError):
    """A replay of stored actions did not reproduce the collected episode."""


def action_scripts(store, round_: int) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """The stored actions of round ``round_``, keyed by (tour id, episode id): what
    ``replay_round`` executes and checks."""
    scripts: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for i in range(len(store)):
        meta = store.meta(i)
        if int(meta["round"]) != round_:
            continue
        key = (str(meta["tour_id"]), str(meta["episode_id"]))
        if key in scripts:
            raise ReplayError(f"{store.root}: episode {key[1]} of tour {key[0]} is stored twice in round {round_}")
        ep = store[i]
        missing = [k for k in ACTION_FIELDS if k not in ep.steps]
        if missing:
            raise ReplayError(f"{store.root}: episode {key[1]} (index {i}) has no {missing}")
        scripts[key] = {k: np.asarray(ep.steps[k]).astype(np.int64) for k in ACTION_FIELDS}
    return scripts


def _actions_step(row: int, actions: dict[str, int]) -> dict[str, np.ndarray]:
    """An agent step of the actions-only store: the action fields as int8."""
    return {k: np.int8(actions[k]) for k in ACTION_FIELDS}


@dataclass
class CollectStats:
    episodes: int = 0
    steps: int = 0
    expert_steps: int = 0
    agrees: int = 0  # policy choice == expert label, over agent steps where the policy ran
    decided: int = 0
    seconds: float = 0.0
    env_steps: int = 0  # every environment step (agent, oracle, teleports), stored or not
    start_s: float = 0.0  # of ``seconds``: starting the environment workers


class CollectDriver:
    """``decide`` for collection: features and maps from the pipeline, the policy's sampled
    actions with the beta override, per-stream episode buffers written to the store."""

    def __init__(self, policy, pipeline, writer: TrajectoryWriter, beta: float, seed: int, round_: int,
                 order_of: dict[str, int], run_policy: bool = True, bn_train_mode: bool = False, fp16_tokens: bool = False,
                 observations: bool = True, script: dict[tuple[str, str], dict[str, np.ndarray]] | None = None,
                 deferred_encoding: bool = False):
        from ivln_ce.models.cma import PolicyState

        self.policy, self.pipeline, self.writer = policy, pipeline, writer
        self.beta, self.seed, self.round = beta, seed, round_
        self.order_of = order_of  # tour id -> its position in the round's plan
        self.run_policy = run_policy
        self.bn_train_mode = bn_train_mode
        self.fp16_tokens = fp16_tokens
        self.state = PolicyState()
        self.buffers: dict[str, dict[str, Any]] = {}
        self.positions: dict[str, int] = {}  # episodes begun per stream: the position in its tour
        self.rngs: dict[str, np.random.Generator] = {}
        self.stats = CollectStats()
        self.observations = observations  # false: store the actions only (replay_round re-renders)
        self.script = script  # replay: the stored actions per (tour id, episode id)
        self.replayed: set[tuple[str, str]] = set()
        self.maps_needed = hasattr(policy.net, "map_encoder")
        self.rgb_needed = getattr(policy.net, "rgb_encoder", None) is not None
        # the policy never runs: buffered steps hold their raw frames under the feature keys
        # until ``_encode_buffered`` replaces them (buffer["encoded"] steps hold features)
        self.deferred = bool(deferred_encoding and observations and not run_policy)

    def _rng(self, view: StreamView) -> np.random.Generator:
        g = self.rngs.get(view.stream_id)
        if g is None:
            g = np.random.default_rng([self.seed, self.round, tour_key(view.tour_id), 17])
            self.rngs[view.stream_id] = g
        return g

    def _flush(self, view: StreamView, episode_id: str) -> None:
        buf = self.buffers.pop(view.stream_id, None)
        if not buf or buf["episode_id"] != episode_id or not buf["steps"]:
            return
        steps = buf["steps"]
        if self.deferred:
            self._encode_buffered(buf, final=True)
        fields = {k: np.stack([s[k] for s in steps]) for k in steps[0]}
        T = len(steps)
        if self.script is not None:
            key = (view.tour_id, episode_id)
            stored = len(self.script[key]["executed_actions"])
            if T != stored:
                raise ReplayError(f"replay diverged: episode {episode_id} of tour {view.tour_id} (round {self.round}) ended "
                                  f"after {T} agent steps, the store has {stored}")
            self.replayed.add(key)
        meta = {"episode_id": episode_id, "tour_id": view.tour_id, "scan": view.scan, "steps": T, "round": self.round,
                "order": [self.round, self.order_of.get(view.tour_id, 0), buf["position"]], "position": buf["position"]}
        instruction = buf["instruction"]
        if self.fp16_tokens:  # the official fp16 store option (see train.fp16_token_bug)
            instruction = fp16_tokens(instruction)
        self.writer.append(Episode(meta, {"instruction": instruction}, fields))
        self.stats.episodes += 1
        self.stats.steps += T

    def _policy_rows(self, views: Sequence[StreamView]) -> list[int]:
        """Rows the policy runs on: every row when tour memory or T3 (BatchNorm statistics of
        the active workers) needs it, else the agent steps, where its action may be executed."""
        if not self.run_policy:
            return []
        variant = getattr(self.policy.net, "variant", "cma")
        if variant in ("tourcma", "poolcma", "poolendcma") or self.bn_train_mode:
            return list(range(len(views)))
        return [i for i, v in enumerate(views) if v.info["produce_action"]]

    @torch.no_grad()
    def decide(self, views: Sequence[StreamView]) -> list[int]:
        if not (self.observations or self.run_policy):  # actions only, the expert always acts: no encoder, no map
            return self._record_steps(views, {}, _actions_step)
        agent_rows = [i for i, v in enumerate(views) if v.info["produce_action"]]
        policy_rows = self._policy_rows(views)
        rows = sorted(set(agent_rows) | set(policy_rows))
        batch = self.pipeline(views, [] if self.deferred else rows)
        where = {r: n for n, r in enumerate(rows)}  # view row -> feature row
        sampled: dict[int, int] = {}
        if policy_rows and self.script is None:
            index = torch.tensor(policy_rows, device=batch["instruction"].device)
            frows = torch.tensor([where[r] for r in policy_rows], device=index.device)
            obs = {"instruction": batch["instruction"].index_select(0, index),
                   "depth_features": batch["depth_features"].index_select(0, frows)}
            if self.rgb_needed:
                obs["rgb_features"] = batch["rgb_features"].index_select(0, frows)
            if self.maps_needed:
                obs["map"] = batch["map"].index_select(0, index)
            streams = [batch["streams"][i] for i in policy_rows]
            self.policy.act(obs, self.state, streams, batch["episode_start"].index_select(0, index),
                            batch["tour_start"].index_select(0, index), deterministic=True)
            probs = torch.softmax(self.policy.last_logits.float(), dim=1).cpu().numpy().astype(np.float64)
            for n, i in enumerate(policy_rows):
                p = probs[n] / probs[n].sum()
                sampled[i] = int(self._rng(views[i]).choice(4, p=p))
        if self.deferred:  # the agent rows' raw frames, copied off the views and encoded later
            depth = {i: np.array(views[i].obs["depth"]) for i in rows}
            rgb = {i: np.array(views[i].obs["rgb"]) for i in rows} if self.rgb_needed else None
        else:
            depth = batch["depth_features"].cpu().numpy() if rows else None
            rgb = batch["rgb_features"].cpu().numpy() if (self.rgb_needed and rows) else None
        occ = batch["occupancy_map"].cpu().numpy() if self.maps_needed else None
        sem = batch["semantic_map"].cpu().numpy() if self.maps_needed else None
        progress = batch["progress"].cpu().numpy()

        def full_step(i: int, actions: dict[str, int]) -> dict[str, np.ndarray]:
            f = i if self.deferred else where[i]
            step = {"depth_features": depth[f], "progress": progress[i].reshape(1).astype(np.float32)}
            step |= {k: np.int64(a) for k, a in actions.items()}
            if rgb is not None:
                step["rgb_features"] = rgb[f]
            if occ is not None:
                step["occupancy_map"], step["semantic_map"] = occ[i].astype(np.uint8), sem[i].astype(np.uint8)
            return step

        executed = self._record_steps(views, sampled, full_step if self.observations else _actions_step)
        if policy_rows and self.script is None:
            self.state.record_actions([batch["streams"][i] for i in policy_rows], [executed[i] for i in policy_rows])
        return executed

    def _buffer(self, v: StreamView) -> dict[str, Any]:
        """The stream's buffer for its current episode (a new one when the episode changed)."""
        buf = self.buffers.get(v.stream_id)
        eid = v.info["episode_id"]
        if buf is None or buf["episode_id"] != eid:
            position = self.positions.get(v.stream_id, -1) + 1
            self.positions[v.stream_id] = position
            buf = {"episode_id": eid, "steps": [], "prev": -1, "position": position,
                   "instruction": np.asarray(v.obs["instruction"], dtype=np.int64)}
            self.buffers[v.stream_id] = buf
        return buf

    def _choose(self, v: StreamView, buf: dict[str, Any], sampled: int | None) -> tuple[int, int]:
        """(expert label, executed action) at an agent step: the expert with probability beta,
        else the policy's sample; under replay the stored action, after checking the label."""
        expert = int(v.obs["expert_action"])
        if self.script is not None:
            t = len(buf["steps"])
            key = (v.tour_id, buf["episode_id"])
            stored = self.script.get(key)
            if stored is None:
                raise ReplayError(f"replay: no stored actions for episode {key[1]} of tour {key[0]} in round {self.round} "
                                  "(the store and the round's plan disagree)")
            if t >= len(stored["executed_actions"]):
                raise ReplayError(f"replay diverged: episode {key[1]} of tour {key[0]} (round {self.round}) runs past its "
                                  f"{len(stored['executed_actions'])} stored actions")
            if int(stored["oracle_actions"][t]) != expert:
                raise ReplayError(f"replay diverged: episode {key[1]} of tour {key[0]} (round {self.round}), step {t}: the "
                                  f"expert now says {expert}, the store says {int(stored['oracle_actions'][t])} (were the "
                                  "scenes, the simulator or its settings changed since collection?)")
            return expert, int(stored["executed_actions"][t])
        use_expert = self._rng(v).random() < self.beta
        self.stats.expert_steps += int(use_expert)
        return expert, (expert if (use_expert or sampled is None) else sampled)

    def _record_steps(self, views: Sequence[StreamView], sampled: dict[int, int],
                      make_step: Callable[[int, dict[str, int]], dict[str, np.ndarray]]) -> list[int]:
        """The executed action of every view (``sampled``: the policy's samples by row). Each
        agent step's record, ``make_step(row, action fields)``, goes to its episode's buffer;
        episodes that just finished are flushed first."""
        executed = []
        for i, v in enumerate(views):
            if "metrics" in v.info:
                self._flush(v, v.info["metrics_episode_id"])
            if not v.info["produce_action"]:
                executed.append(sampled.get(i, 0))  # ignored: the oracle acts
                continue
            buf = self._buffer(v)
            expert, action = self._choose(v, buf, sampled.get(i))
            if i in sampled:
                self.stats.decided += 1
                self.stats.agrees += int(sampled[i] == expert)
            buf["steps"].append(make_step(i, {"oracle_actions": expert, "prev_actions": buf["prev"], "executed_actions": action}))
            buf["prev"] = action
            if self.deferred:
                self._encode_buffered(buf, final=False)
            executed.append(action)
        return executed

    def _encode_buffered(self, buf: dict[str, Any], final: bool) -> None:
        """Replace the raw frames of the buffer's steps by their features, ``ENCODE_CHUNK``
        steps per encoder call as they fill (and the remainder when ``final``): the chunks are
        fixed by the step index, so an episode's features do not depend on its neighbours."""
        steps, done = buf["steps"], buf.get("encoded", 0)
        while len(steps) - done >= ENCODE_CHUNK or (final and done < len(steps)):
            part = steps[done:done + ENCODE_CHUNK]
            frames = lambda key: torch.from_numpy(np.stack([s[key] for s in part])).to(self.pipeline.device)
            feats = self.pipeline.encode(frames("depth_features"), frames("rgb_features") if self.rgb_needed else None)
            for key, value in feats.items():
                value = value.cpu().numpy()
                for n, s in enumerate(part):
                    s[key] = value[n]
            done += len(part)
        buf["encoded"] = done

    def final(self, view: StreamView) -> None:
        if "metrics" in view.info:
            self._flush(view, view.info["metrics_episode_id"])

    def drop(self, stream: str) -> None:
        self.state.drop(stream)
        self.buffers.pop(stream, None)
        self.positions.pop(stream, None)
        self.rngs.pop(stream, None)
        self.pipeline.drop(stream)


def collect_round(cfg, items: list[TourItem], plan: list[int], references, scenes_dir, policy, pipeline,
                  writer: TrajectoryWriter, beta: float, round_: int, progress=None, full_plan: list[int] | None = None,
                  script: dict[tuple[str, str], dict[str, np.ndarray]] | None = None) -> CollectStats:
    """Collect the items ``plan`` (this rank's share of the round's ``full_plan``) with
    ``num_envs`` environments into ``writer``; order keys come from the full plan. With
    ``script`` (see ``replay_round``) the stored actions are executed instead."""
    order_of = {items[k].tour.tour_id: n for n, k in enumerate(full_plan if full_plan is not None else plan)}
    replay = script is not None
    # under replay the policy does not act, but the frozen encoders batch frames as they did while
    # collecting (per tick the policy's rows, deferred each episode's chunks: batch composition
    # can move a feature's last bits)
    run_policy = beta < 1.0 or bool(cfg.train.bn_train_mode)
    policy.collection_mode() if (hasattr(policy, "collection_mode") and not replay) else policy.eval()
    driver = CollectDriver(policy, pipeline, writer, beta, int(cfg.seed), round_, order_of, run_policy, bool(cfg.train.bn_train_mode),
                           bool(cfg.train.fp16_token_bug and cfg.train.store_fp16),
                           observations=replay or bool(cfg.train.store_observations), script=script,
                           deferred_encoding=bool(cfg.train.deferred_encoding))
    keys = ["depth"]
    if driver.rgb_needed:
        keys.append("rgb")
    if driver.maps_needed and cfg.mapping.mode.value != "known":
        keys.append("semantic12" if cfg.mapping.semantics.value == "gt" else "rgb")
    engine = RolloutEngine(items, cfg.simulator, cfg.env, references, scenes_dir, num_envs=min(int(cfg.train.num_envs), max(1, len(plan))),
                           envs_per_worker=int(cfg.train.envs_per_worker), groups=int(cfg.train.groups), longest_first=True,
                           success_distance=cfg.metrics.success_distance, expert=True, obs_keys=sorted(set(keys)),
                           seed=int(cfg.seed) + 1000 * round_)
    t0 = time.perf_counter()
    with engine:
        engine.run(plan, driver.decide, on_stream_end=driver.drop, on_final_view=driver.final,
                   on_progress=(lambda r, n: progress(r, n)) if progress is not None else None)
    driver.stats.seconds = time.perf_counter() - t0
    driver.stats.env_steps, driver.stats.start_s = engine.stats.env_steps, engine.stats.start_s
    writer.sync()
    policy.eval()
    if replay:
        planned = {items[k].tour.tour_id for k in plan}
        left = sorted(key for key in script if key[0] in planned and key not in driver.replayed)
        if left:
            raise ReplayError(f"replay of round {round_}: {len(left)} stored episode(s) were never reached, e.g. episode "
                              f"{left[0][1]} of tour {left[0][0]}")
    return driver.stats


def replay_round(cfg, items: list[TourItem], plan: list[int], references, scenes_dir, policy, pipeline, store,
                 writer: TrajectoryWriter, round_: int, beta: float, progress=None, full_plan: list[int] | None = None) -> CollectStats:
    """Re-render round ``round_`` of an actions-only ``store`` into ``writer``: the items of
    ``plan`` run again with their stored executed actions, and every agent step is written
    with its observations, as a full collection would have stored it (same metadata and
    order keys). ``beta`` is the round's: the policy does not run, but the encoders batch the
    frames as they batched them while collecting (per tick, or deferred). Raises ``ReplayError`` when an expert label, an episode
    length or the set of episodes differs from the store."""
    return collect_round(cfg, items, plan, references, scenes_dir, policy, pipeline, writer, beta, round_, progress,
                         full_plan=full_plan, script=action_scripts(store, round_))


def accuracy(stats: CollectStats) -> float:
    return stats.agrees / stats.decided if stats.decided else math.nan
