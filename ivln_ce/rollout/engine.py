"""The rollout engine: K tour environments in worker processes, one batched decision per tick.

Evaluation and DAgger collection drive environments through this one engine, so what is
trained is what is evaluated (DESIGN.md). ``RolloutEngine.run(tours, decide)``:

* starts ``num_envs`` workers (``rollout.worker``; each its own simulator), deals the tours
  from a queue (a tour never splits) and refills a worker with the next tour as soon as its
  tour ends; when the queue is empty the worker is paused, other streams go on untouched;
* every tick hands the current observation of every active stream to ``decide(views)``,
  which returns one action per view (``None`` lets a worker's scripted agent act), sends
  them, and waits for all active workers: one batched policy step per tick. Streams whose
  step produces no action (oracle phases: the environment ignores it) are sent their next
  step before ``decide`` runs, so their workers render while the parent computes;
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
        success_distance: float = 3.0,
        agent: str | None = None,
        expert: bool = False,
        obs_keys: Iterable[str] = (),
        seed: int = 100,
        start_method: str = "spawn",
        worker_extra: dict | None = None,
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.items = list(items)
        self.num_envs = num_envs
        self._spec = dict(
            simulator=as_dataclass(simulator), env=as_dataclass(env), items=self.items, references=dict(references or {}),
            scenes_dir=None if scenes_dir is None else str(scenes_dir), success_distance=success_distance,
            agent=agent, expert=expert, obs_keys=tuple(obs_keys), extra=dict(worker_extra or {}),
        )
        self.seed = seed
        self.ctx = mp.get_context(start_method)
        self.workers: list[EnvWorker] = []
        self.worker_info: list[dict] = []
        self.stats = EngineStats()
        self._streams = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self, count: int | None = None) -> None:
        """Start the workers (worker i is seeded seed + i, as officially) and wait until ready."""
        if self.workers:
            return
        n = self.num_envs if count is None else max(1, min(count, self.num_envs))
        self.workers = [EnvWorker(self.ctx, WorkerSpec(index=i, seed=self.seed + i, run_seed=self.seed, **self._spec)) for i in range(n)]
        try:
            for w in self.workers:
                kind, info = w.receive()
                if kind != "ready":
                    raise RuntimeError(f"environment worker {w.index} sent {kind!r} before 'ready'")
                w.info = info
                self.worker_info.append(info)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for w in self.workers:  # ask every worker first, so they shut down in parallel
            w.request_close()
        for w in self.workers:
            w.close()
        self.workers = []

    def __enter__(self) -> "RolloutEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _new_stream(self, tour_id: str) -> str:
        self._streams += 1
        return f"s{self._streams}:{tour_id}"

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
        queue = deque(int(k) for k in tours)
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
        if self._spec["agent"] is None:
            raise ValueError("decide=None needs a scripted agent in the workers (agent=...)")
        busy: dict[int, EnvWorker] = {}
        for w in self.workers:
            if queue:
                k = queue.popleft()
                w.tour = self.items[k].tour.tour_id
                w.send("run_tour", k)
                busy[w.index] = w
        while busy:
            for w, msg in receive_any(list(busy.values())):
                _, result, st = msg
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
                    k = queue.popleft()
                    w.tour = self.items[k].tour.tour_id
                    w.send("run_tour", k)
                else:
                    w.tour = None
                    del busy[w.index]

    def _view(self, w: EnvWorker, stream: str, tour_index: int, payload: dict, first: bool) -> StreamView:
        item = self.items[tour_index]
        return StreamView(stream, w.index, tour_index, item.tour.tour_id, payload["scan"], payload["obs"], payload["info"],
                          first=first, executed_action=payload.get("executed_action"))

    def _run_lockstep(self, queue: deque, decide: Decide, on_tour, on_stream_end, on_progress, on_final_view) -> None:
        active: dict[int, StreamView] = {}  # worker index -> current view

        def begin(w: EnvWorker) -> bool:
            if not queue:
                w.tour = None
                return False
            k = queue.popleft()
            w.tour = self.items[k].tour.tour_id
            w.send("reset", k)
            _, payload = w.receive()
            active[w.index] = self._view(w, self._new_stream(w.tour), k, payload, True)
            return True

        for w in self.workers:
            begin(w)
        by_index = {w.index: w for w in self.workers}
        scripted = self._spec["agent"] is not None
        while active:
            views = [active[i] for i in sorted(active)]
            # an environment ignores the action on steps that produce none (oracle phases): let
            # those workers render their next step while decide runs (same batches, same results)
            early = {v.worker for v in views if not v.info.get("produce_action")}
            for v in views:
                if v.worker in early:
                    by_index[v.worker].send("step", None if scripted else 0)
            t = time.perf_counter()
            actions = list(decide(views))
            self.stats.decide_ms += 1e3 * (time.perf_counter() - t)
            if len(actions) != len(views):
                raise ValueError(f"decide returned {len(actions)} actions for {len(views)} streams")
            for v, a in zip(views, actions):
                if v.worker not in early:
                    by_index[v.worker].send("step", None if a is None else int(a))
            t = time.perf_counter()
            replies: dict[int, dict] = {}
            pending = [by_index[v.worker] for v in views]
            while pending:
                for w, msg in receive_any(pending):
                    replies[w.index] = msg[1]
                pending = [w for w in pending if w.index not in replies]
            self.stats.wait_ms += 1e3 * (time.perf_counter() - t)
            self.stats.ticks += 1
            for v in views:
                payload = replies[v.worker]
                self.stats.env_steps += 1
                self.stats.env_ms += payload["env_ms"]
                self.stats.render_ms += payload["render_ms"]
                if payload.get("done"):
                    result: TourResult = payload["info"]["tour_result"]
                    self.stats.tours += 1
                    del active[v.worker]
                    if on_final_view is not None:
                        on_final_view(self._view(by_index[v.worker], v.stream_id, v.tour_index, payload, False))
                    if on_tour is not None:
                        on_tour(result, v.stream_id)
                    if on_stream_end is not None:
                        on_stream_end(v.stream_id)
                    if on_progress is not None:
                        on_progress(result, 1)
                    begin(by_index[v.worker])
                else:
                    active[v.worker] = self._view(by_index[v.worker], v.stream_id, v.tour_index, payload, False)
                    if on_progress is not None:
                        on_progress(None, 1)
