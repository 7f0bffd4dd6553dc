"""The rollout engine: K tour environments in worker processes, one batched decision per tick.

Evaluation and DAgger collection drive environments through this one engine, so what is
trained is what is evaluated (DESIGN.md). ``RolloutEngine.run(tours, decide)``:

* runs ``num_envs`` environments in worker processes (``rollout.worker``), ``envs_per_worker``
  of them per process (each its own simulator; a process's environments share its scene
  caches and GL context, so environments can outnumber cores). Environment ``e`` is seeded
  ``seed + e`` however the environments are spread over processes;
* deals the tours from a queue (a tour never splits; ``longest_first`` deals tours with more
  episodes first, so the run's wall time approaches its longest tour's) and refills an
  environment with the next tour as soon as its tour ends; when the queue is empty the
  environment is paused, other streams go on untouched;
* every tick hands the current observation of every active stream of one *group* to
  ``decide(views)``, which returns one action per view (``None`` lets a worker's scripted
  agent act), and sends them. With ``groups=1`` (the default) every stream is in one group:
  one batched policy step per tick, then a wait for all workers. With ``groups=G`` the worker
  processes are split into G groups taken in turn: group g's observations are decided while
  the other groups' workers step, so the parent and the workers overlap (a GPU need not idle
  while environments step). Results do not depend on K, the spread or the grouping wherever
  the policy's arithmetic does not depend on its batch (tests). Workers whose streams all
  produce no action (oracle phases: the environment ignores it) are sent their next step
  before ``decide`` runs, so they render while the parent computes;
* each running tour is a *stream* with a fresh id, so per-stream memory (recurrent state,
  maps) keyed by it can never leak into another tour; ``on_stream_end(stream_id)`` lets the
  owner free it;
* when a tour ends, ``on_tour(result, stream_id)`` receives its ``TourResult`` (per-episode metrics keyed
  by the episode they belong to, teleports, the path log);
* scripted agents without per-step needs (``decide=None``) run whole tours inside the workers
  with no per-step messages (``run_tour``): no lockstep barrier between workers.

A worker that raises or dies stops the run with ``WorkerCrashed`` carrying its exit code and
traceback; results already handed to ``on_tour`` are kept by their owner.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence


from ivln_ce.config import EnvConfig, SimulatorConfig, as_dataclass
from ivln_ce.data.episodes import ReferenceTrajectory
from ivln_ce.env.tour_env import TourItem
from ivln_ce.rollout.records import TourResult
from ivln_ce.rollout.streams import StreamView
from ivln_ce.rollout.worker import EnvWorker, WorkerSpec, receive_any


@dataclass
class EngineStats:
    """Where the time went: per environment step and per tick."""

    ticks: int = 0
    env_steps: int = 0
    env_ms: float = 0.0  # summed over environment steps (worker side: render, navigation, measures)
    render_ms: float = 0.0  # the rendering part of env_ms (as the simulator counts it)
    wait_ms: float = 0.0  # wall time the parent waited for workers
    decide_ms: float = 0.0  # wall time in decide (the policy side)
    wall_s: float = 0.0
    start_s: float = 0.0  # starting the workers (spawn, imports, first scene), inside wall_s
    tours: int = 0
    extra: dict[str, float] = field(default_factory=dict)  # decide's own breakdown (ms, summed)
    worker_ms: dict[str, float] = field(default_factory=dict)  # a worker-side policy's breakdown (ms, summed)

    @classmethod
    def combined(cls, parts: Sequence["EngineStats"]) -> "EngineStats":
        """The stats of engines that ran side by side (torchrun ranks): counts and summed times
        add up, wall times overlap (the slowest counts), so per-step figures are averages over
        every step of every part and steps/s is the parts' joint throughput."""
        out = cls()
        for p in parts:
            for name in ("ticks", "env_steps", "env_ms", "render_ms", "wait_ms", "decide_ms", "tours"):
                setattr(out, name, getattr(out, name) + getattr(p, name))
            out.wall_s, out.start_s = max(out.wall_s, p.wall_s), max(out.start_s, p.start_s)
            for mine, theirs in ((out.extra, p.extra), (out.worker_ms, p.worker_ms)):
                for k, v in theirs.items():
                    mine[k] = mine.get(k, 0.0) + v
        return out

    def as_dict(self) -> dict[str, Any]:
        steps = max(self.env_steps, 1)
        ticks = max(self.ticks, 1)
        out = {
            "env_steps": self.env_steps,
            "ticks": self.ticks,
            "tours": self.tours,
            "wall_s": round(self.wall_s, 3),
            "start_s": round(self.start_s, 3),
            "steps_per_s": round(self.env_steps / self.wall_s, 2) if self.wall_s > 0 else None,
            "steady_steps_per_s": round(self.env_steps / (self.wall_s - self.start_s), 2) if self.wall_s > self.start_s else None,
            "ms_per_step": {"env (worker: render, navigation, measures)": round(self.env_ms / steps, 3),
                            "of which render": round(self.render_ms / steps, 3),
                            **{f"{k} (in the worker)": round(v / steps, 3) for k, v in self.worker_ms.items()}},
        }
        if self.ticks:  # lockstep runs: the parent's side of every tick
            out["ms_per_tick"] = {"waiting for workers": round(self.wait_ms / ticks, 3), "decide": round(self.decide_ms / ticks, 3)}
            for k, v in self.extra.items():
                out["ms_per_tick"][k] = round(v / ticks, 3)
        return out


Decide = Callable[[list[StreamView]], Sequence[int | None]]


class RolloutEngine:
    def __init__(
        self,
        items: Sequence[TourItem],
        simulator: SimulatorConfig,
        env: EnvConfig,
        references: dict[str, ReferenceTrajectory] | None = None,
        scenes_dir: str | Path | None = None,
        *,
        num_envs: int = 1,
        envs_per_worker: int = 1,
        groups: int = 1,
        longest_first: bool = False,
        success_distance: float = 3.0,
        agent: str | None = None,
        expert: bool = False,
        obs_keys: Iterable[str] = (),
        seed: int = 100,
        start_method: str = "spawn",
        worker_extra: dict | None = None,
    ):
        for name, value in (("num_envs", num_envs), ("envs_per_worker", envs_per_worker), ("groups", groups)):
            if int(value) < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if int(envs_per_worker) > 1 and getattr(as_dataclass(simulator).backend, "value", "embedded") != "embedded":
            raise ValueError(f"envs_per_worker={envs_per_worker}: only the embedded simulator runs several environments in one "
                             "process (habitat-sim supports one Simulator per process); use envs_per_worker=1")
        self.items = list(items)
        self.num_envs = int(num_envs)
        self.envs_per_worker = int(envs_per_worker)
        self.groups = int(groups)
        self.longest_first = bool(longest_first)
        self._spec = dict(
            simulator=as_dataclass(simulator), env=as_dataclass(env), items=self.items, references=dict(references or {}),
            scenes_dir=None if scenes_dir is None else str(scenes_dir), success_distance=success_distance,
            agent=agent, expert=expert, obs_keys=tuple(obs_keys), extra=dict(worker_extra or {}),
        )
        self.seed = seed
        self.ctx = mp.get_context(start_method)
        self.workers: list[EnvWorker] = []
        #: one entry per environment (in environment order): its process's report, its seed
        self.worker_info: list[dict] = []
        self.stats = EngineStats()
        self._streams = 0
        self._first_env: dict[int, int] = {}  # process index -> its first environment

    # ------------------------------------------------------------------ lifecycle
    @staticmethod
    def layout(num_envs: int, envs_per_worker: int) -> list[int]:
        """Environments per process: ``ceil(num_envs / envs_per_worker)`` processes, as even as possible."""
        processes = -(-num_envs // max(1, envs_per_worker))
        return [num_envs // processes + (1 if i < num_envs % processes else 0) for i in range(processes)]

    def start(self, count: int | None = None) -> None:
        """Start the workers and wait until ready (at most ``count`` environments, for a run of
        fewer tours); environment e is seeded seed + e, as officially."""
        if self.workers:
            return
        n = self.num_envs if count is None else max(1, min(count, self.num_envs))
        first = 0
        for i, size in enumerate(self.layout(n, self.envs_per_worker)):
            self.workers.append(EnvWorker(self.ctx, WorkerSpec(index=i, seed=self.seed + first, envs=size, run_seed=self.seed,
                                                               **self._spec)))
            self._first_env[i] = first
            first += size
        try:
            for w in self.workers:
                kind, info = w.receive()
                if kind != "ready":
                    raise RuntimeError(f"environment worker {w.index} sent {kind!r} before 'ready'")
                w.info = info
                for slot, seed in enumerate(info["seeds"]):
                    self.worker_info.append({**{k: v for k, v in info.items() if k != "seeds"}, "seed": seed,
                                             "env": self._first_env[w.index] + slot, "process": w.index})
        except BaseException:
            self.close()
            raise

    def close(self, force: bool = False) -> None:
        """Close the workers; ``force`` (after an error) terminates them at once: a worker may be
        blocked sending a reply nobody will read."""
        for w in self.workers:  # ask every worker first, so they shut down in parallel
            if force:
                w.process.terminate()
            else:
                w.request_close()
        for w in self.workers:
            w.close()
        self.workers = []
        self._first_env = {}

    def __enter__(self) -> "RolloutEngine":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(force=exc_type is not None)

    def _new_stream(self, tour_id: str) -> str:
        self._streams += 1
        return f"s{self._streams}:{tour_id}"

    def schedule(self, tours: Sequence[int]) -> deque:
        """The order tours are dealt in: as given, or (``longest_first``) tours with more
        episodes first, ties in the given order."""
        order = [int(k) for k in tours]
        if self.longest_first:
            order = sorted(order, key=lambda k: -len(self.items[k].episodes))
        return deque(order)

    # ------------------------------------------------------------------ running
    def run(
        self,
        tours: Sequence[int],
        decide: Decide | None = None,
        on_tour: Callable[[TourResult, str | None], None] | None = None,
        on_stream_end: Callable[[str], None] | None = None,
        on_progress: Callable[[TourResult | None, int], None] | None = None,
        on_final_view: Callable[[StreamView], None] | None = None,
    ) -> None:
        """Run the tours (indices into ``items``); see the module docstring.

        ``on_final_view`` receives each tour's last observation (which no decision follows),
        so recorders see the last episode's agent-done info even when it ends the tour."""
        queue = self.schedule(tours)
        if not queue:
            return
        t0 = time.perf_counter()
        self.start(len(queue))
        self.stats.start_s += time.perf_counter() - t0
        try:
            if decide is None:
                self._run_autonomous(queue, on_tour, on_progress)
            else:
                self._run_lockstep(queue, decide, on_tour, on_stream_end, on_progress, on_final_view)
        finally:
            self.stats.wall_s += time.perf_counter() - t0

    def _run_autonomous(self, queue: deque, on_tour, on_progress) -> None:
        """Each process runs one whole tour at a time in its first environment: a process steps
        its environments one after another, so more tours in flight would only queue (and
        deal the longest tours to one process)."""
        if self._spec["agent"] is None:
            raise ValueError("decide=None needs a scripted agent in the workers (agent=...)")
        busy: set[int] = set()

        def deal(w: EnvWorker) -> None:
            k = queue.popleft()
            w.tours[0] = self.items[k].tour.tour_id
            w.send("run_tour", 0, k)
            busy.add(w.index)

        for w in self.workers:
            if queue:
                deal(w)
        while busy:
            for w, msg in receive_any([w for w in self.workers if w.index in busy]):
                _, slot, result, st = msg
                busy.discard(w.index)
                w.tours.pop(slot, None)
                self.stats.env_steps += st["steps"]
                self.stats.env_ms += st["env_ms"]
                self.stats.render_ms += st["render_ms"]
                for key, ms in st.get("timings", {}).items():  # a policy inside the worker
                    self.stats.worker_ms[key] = self.stats.worker_ms.get(key, 0.0) + ms
                self.stats.tours += 1
                if on_tour is not None:
                    on_tour(result, None)
                if on_progress is not None:
                    on_progress(result, st["steps"])
                if queue:
                    deal(w)

    def _view(self, env: int, stream: str, tour_index: int, payload: dict, first: bool) -> StreamView:
        item = self.items[tour_index]
        return StreamView(stream, env, tour_index, item.tour.tour_id, payload["scan"], payload["obs"], payload["info"],
                          first=first, executed_action=payload.get("executed_action"))

    def _run_lockstep(self, queue: deque, decide: Decide, on_tour, on_stream_end, on_progress, on_final_view) -> None:
        active: dict[int, StreamView] = {}  # environment -> current view
        scripted = self._spec["agent"] is not None
        first_env = self._first_env

        def deal(w: EnvWorker, slots: Sequence[int]) -> list[tuple[int, int]]:
            """Send the next tours of the queue to the given slots of ``w`` (one message)."""
            dealt = []
            for slot in slots:
                if not queue:
                    break
                k = queue.popleft()
                w.tours[slot] = self.items[k].tour.tour_id
                dealt.append((slot, k))
            if dealt:
                w.send("reset_many", dealt)
            return dealt

        def begin(dealt: dict[int, list[tuple[int, int]]]) -> None:
            """Receive the first observations of the tours just dealt (every process resets in parallel)."""
            for i, pairs in dealt.items():
                if not pairs:
                    continue
                w = self.workers[i]
                _, replies = w.receive()
                tour_of = dict(pairs)
                for slot, payload in replies:
                    env = first_env[w.index] + slot
                    active[env] = self._view(env, self._new_stream(w.tours[slot]), tour_of[slot], payload, True)

        begin({w.index: deal(w, range(w.envs)) for w in self.workers})
        groups = [[w for w in self.workers if w.index % self.groups == g] for g in range(min(self.groups, len(self.workers)))]
        pending: set[int] = set()  # processes with a step request outstanding

        def collect(members: list[EnvWorker]) -> None:
            """Wait for the group's step replies and hand finished tours on; refill their slots."""
            waiting = [w for w in members if w.index in pending]
            if not waiting:
                return
            t = time.perf_counter()
            replies: dict[int, list] = {}
            while waiting:
                for w, msg in receive_any(waiting):
                    replies[w.index] = msg[1]
                waiting = [w for w in waiting if w.index not in replies]
            self.stats.wait_ms += 1e3 * (time.perf_counter() - t)
            refills: dict[int, list[tuple[int, int]]] = {}
            for w in members:
                if w.index not in replies:
                    continue
                pending.discard(w.index)
                ended = []
                for slot, payload in replies[w.index]:
                    env = first_env[w.index] + slot
                    v = active[env]
                    self.stats.env_steps += 1
                    self.stats.env_ms += payload["env_ms"]
                    self.stats.render_ms += payload["render_ms"]
                    if payload.get("done"):
                        result: TourResult = payload["info"]["tour_result"]
                        self.stats.tours += 1
                        del active[env]
                        w.tours.pop(slot, None)
                        ended.append(slot)
                        if on_final_view is not None:
                            on_final_view(self._view(env, v.stream_id, v.tour_index, payload, False))
                        if on_tour is not None:
                            on_tour(result, v.stream_id)
                        if on_stream_end is not None:
                            on_stream_end(v.stream_id)
                        if on_progress is not None:
                            on_progress(result, 1)
                    else:
                        active[env] = self._view(env, v.stream_id, v.tour_index, payload, False)
                        if on_progress is not None:
                            on_progress(None, 1)
                refills[w.index] = deal(w, ended)
            begin(refills)

        def tick(members: list[EnvWorker]) -> None:
            """Decide the group's active streams and send their steps."""
            envs = {first_env[w.index] + slot: w for w in members for slot in range(w.envs)}
            views = [active[e] for e in sorted(active) if e in envs]
            if not views:
                return
            # an environment ignores the action on steps that produce none (oracle phases): a
            # process whose streams all take such a step renders it while decide runs
            by_process: dict[int, list[StreamView]] = {}
            for v in views:
                by_process.setdefault(envs[v.worker].index, []).append(v)
            early = {i for i, vs in by_process.items() if not any(v.info.get("produce_action") for v in vs)}
            for i in sorted(early):
                w = self.workers[i]
                w.send("step_many", [(v.worker - first_env[i], None if scripted else 0) for v in by_process[i]])
                pending.add(i)
            t = time.perf_counter()
            actions = list(decide(views))
            self.stats.decide_ms += 1e3 * (time.perf_counter() - t)
            if len(actions) != len(views):
                raise ValueError(f"decide returned {len(actions)} actions for {len(views)} streams")
            action_of = {v.worker: a for v, a in zip(views, actions)}
            for i, vs in sorted(by_process.items()):
                if i in early:
                    continue
                self.workers[i].send("step_many", [(v.worker - first_env[i], None if action_of[v.worker] is None
                                                    else int(action_of[v.worker])) for v in vs])
                pending.add(i)
            self.stats.ticks += 1

        while active or pending:
            for members in groups:
                collect(members)
                tick(members)
