"""Environment worker processes of the rollout engine (no torch in them).

Each worker process owns ``envs`` environments (slots; one simulator and one ``TourEnv``
each) and runs whole tours, one at a time per slot; a tour never splits across
environments. Slots of one process share its scene and navigation caches and its GL context
(embedded backend), so the number of environments can exceed the number of cores; a slot's
environment is made when it is first used. The parent talks to it over a
pipe, always with at most one request outstanding per process:

* ``("reset_many", [(slot, tour_index), ...])`` -> ``("obs_many", [(slot, payload), ...])``:
  the tours' first observations;
* ``("step_many", [(slot, action), ...])`` -> ``("obs_many", [(slot, payload), ...])``;
  ``action=None`` lets the slot's scripted agent choose (oracle, random, ...), which needs the
  simulator and so runs here;
* ``("run_tour", slot, tour_index)`` -> ``("tour", slot, TourResult, stats)``: a scripted
  agent runs the whole tour here without a message per step (no lockstep with other workers;
  the engine keeps one such tour in flight per process, in slot 0);
* ``("close",)``.

A payload holds the requested observation arrays, the step's info (the path logs stripped;
the finished tour's ``TourResult`` rides on the last step's info as ``tour_result``) and the
time the environment step took (rendering, navigation, measures). Any exception is sent back
as ``("error", traceback)`` before the worker exits, and the parent watches the process
sentinel too, so a worker killed outright is reported with its exit code instead of hanging
the run. Workers with scripted agents import neither torch nor triton. A worker can also run a
learned policy itself (``agent="policy"``, ``rollout.worker_policy``): then it imports torch,
and ``sim.gl_context`` makes rendering and triton safe in one process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Sequence

from ivln_ce.config import EnvConfig, SimulatorConfig
from ivln_ce.data.episodes import ReferenceTrajectory
from ivln_ce.env.tour_env import TourEnv, TourItem
from ivln_ce.rollout.records import TourAccumulator, TourResult

#: the small, always-sent observation entries (images are sent only when asked for)
SMALL_KEYS = ("instruction", "progress", "position", "heading", "expert_action")


class WorkerCrashed(RuntimeError):
    """An environment worker died; the message carries its exit code and traceback."""


@dataclass
class WorkerSpec:
    """Everything a worker needs, pickled once when it starts."""

    index: int
    simulator: SimulatorConfig
    env: EnvConfig
    items: list[TourItem]
    references: dict[str, ReferenceTrajectory]
    scenes_dir: str | None
    success_distance: float = 3.0
    #: a scripted agent run inside the worker (``rollout.scripted``), or None
    agent: str | None = None
    #: the first slot's simulator seed; slot j is seeded ``seed + j`` (environment e of a run:
    #: run seed + e, as officially)
    seed: int = 100
    #: environments (slots) in this process
    envs: int = 1
    #: the run's seed, for scripted agents: they re-seed per tour from (run seed, tour id),
    #: so a tour's result does not depend on the worker that ran it
    run_seed: int = 100
    expert: bool = False
    #: image observations to send back each step (any of rgb, depth, semantic, semantic12)
    obs_keys: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def _strip(info: dict) -> dict:
    return {k: v for k, v in info.items() if k not in ("path", "tour_path")}


class _Runner:
    """The worker's side: environment, agent, and the accumulator of the running tour."""

    def __init__(self, spec: WorkerSpec, seed: int):
        from ivln_ce.rollout.scripted import make_agent
        from ivln_ce.sim import make_simulator

        self.spec = spec
        self.sim = make_simulator(spec.simulator, seed=seed)
        self.env = TourEnv(self.sim, spec.items, spec.env, spec.references, spec.scenes_dir,
                           success_distance=spec.success_distance, expert=spec.expert)
        if spec.agent == "policy":  # a learned policy in this worker (imports torch here only)
            from ivln_ce.rollout.worker_policy import WorkerPolicy

            self.agent = WorkerPolicy(self.env, spec.extra["policy_config"], spec.extra["vocab_size"], spec.extra.get("threads", 1))
        else:
            self.agent = make_agent(spec.agent, self.env, seed=spec.run_seed) if spec.agent else None
        self.obs: dict | None = None
        self.info: dict | None = None
        self.acc: TourAccumulator | None = None

    def _payload(self, obs: dict, info: dict, env_ms: float, render_ms: float) -> dict:
        small = {k: obs[k] for k in SMALL_KEYS if k in obs}
        images = {k: obs[k] for k in self.spec.obs_keys if k in obs}
        return {"obs": {**small, **images}, "info": _strip(info), "env_ms": env_ms, "render_ms": render_ms,
                "scan": self.env.episode.scan}

    def _render_ms(self) -> float:
        """The simulator's summed rendering time (0 for a backend that does not count it)."""
        return float(getattr(self.sim, "render_ms", 0.0))

    def reset(self, tour_index: int) -> dict:
        item = self.spec.items[tour_index]
        t0, r0 = time.perf_counter(), self._render_ms()
        obs, info = self.env.reset(options={"tour": tour_index})
        env_ms, render_ms = 1e3 * (time.perf_counter() - t0), self._render_ms() - r0
        self.acc = TourAccumulator(tour_index, item.tour.tour_id, item.tour.scan, [e.episode_id for e in item.episodes])
        self.acc.add(info, after_step=False)
        if self.agent is not None:
            self.agent.reset_memory(True, True, info["tour_id"])
        self.obs, self.info = obs, info
        return self._payload(obs, info, env_ms, render_ms)

    def step(self, action: int | None) -> dict:
        if action is None:
            if self.agent is None:
                raise ValueError("step(None) needs a scripted agent in the worker")
            action = self.agent.act(self.obs, self.info)
        t0, r0 = time.perf_counter(), self._render_ms()
        obs, _, done, _, info = self.env.step(int(action))
        env_ms, render_ms = 1e3 * (time.perf_counter() - t0), self._render_ms() - r0
        if self.agent is not None:
            self.agent.reset_memory(False, bool(info.get("episode_start")), info["tour_id"])
        self.acc.add(info)
        self.obs, self.info = obs, info
        payload = self._payload(obs, info, env_ms, render_ms)
        payload["executed_action"] = int(action)
        if done:
            payload["info"]["tour_result"] = self.acc.finish(info["tour_path"])
            payload["done"] = True
        return payload

    def run_tour(self, tour_index: int) -> tuple[TourResult, dict]:
        self.reset(tour_index)
        env_ms, render_ms, steps = 0.0, 0.0, 0
        before = dict(getattr(self.agent, "timings", {}))
        while True:
            payload = self.step(None)
            env_ms += payload["env_ms"]
            render_ms += payload["render_ms"]
            steps += 1
            if payload.get("done"):
                after = getattr(self.agent, "timings", {})
                timings = {k: v - before.get(k, 0.0) for k, v in after.items()}
                return payload["info"]["tour_result"], {"env_ms": env_ms, "render_ms": render_ms, "steps": steps,
                                                        "timings": timings}

    def close(self) -> None:
        self.sim.close()


def worker_main(conn: Connection, spec: WorkerSpec) -> None:
    """Entry point of a worker process. The tours and references arrive over the pipe after
    start-up (``("init", items, references)``), not as process arguments: a child that dies
    while starting then shows as a broken pipe in the parent instead of a blocked write."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes us
    runners: dict[int, _Runner] = {}

    def runner(slot: int) -> _Runner:
        """The slot's environment, made on its first use (a process running whole tours uses one)."""
        if not 0 <= slot < spec.envs:
            raise ValueError(f"worker {spec.index} has slots 0..{spec.envs - 1}, not {slot}")
        if slot not in runners:
            runners[slot] = _Runner(spec, spec.seed + slot)
        return runners[slot]

    try:
        cmd = conn.recv()
        if cmd[0] != "init":
            raise ValueError(f"worker expected 'init' first, got {cmd[0]!r}")
        spec.items, spec.references = cmd[1], cmd[2]
        sim = runner(0).sim
        conn.send(("ready", {"pid": os.getpid(), "seeds": [spec.seed + j for j in range(spec.envs)],
                             "torch_loaded": "torch" in sys.modules,
                             "navmesh": getattr(sim, "navmesh_source", None), "sim_version": getattr(sim, "version", None)}))
        while True:
            cmd = conn.recv()
            kind = cmd[0]
            if kind == "close":
                break
            if kind == "reset_many":
                conn.send(("obs_many", [(slot, runner(slot).reset(k)) for slot, k in cmd[1]]))
            elif kind == "step_many":
                conn.send(("obs_many", [(slot, runner(slot).step(a)) for slot, a in cmd[1]]))
            elif kind == "run_tour":
                result, stats = runner(cmd[1]).run_tour(cmd[2])
                conn.send(("tour", cmd[1], result, stats))
            elif kind == "crash":  # for tests: die the way a segfaulting renderer would
                os._exit(int(cmd[1]))
            elif kind == "raise":  # for tests: an exception inside the worker
                raise RuntimeError(str(cmd[1]))
            else:
                raise ValueError(f"unknown worker command {kind!r}")
    except EOFError:
        pass  # the parent went away
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass
        sys.exit(1)
    finally:
        for r in runners.values():
            r.close()


@contextlib.contextmanager
def _sigint_held():
    """Hold Ctrl-C off while a worker process is started, without losing it.

    SIGINT is blocked in this thread; a spawned child inherits the mask, so a Ctrl-C that
    reaches the whole process group while the worker imports stays pending there (no
    traceback) until ``worker_main`` ignores SIGINT, which discards it. Here the Ctrl-C is
    delivered when the block ends (or at once through another thread): the parent handles it.
    Ignoring SIGINT here instead, as before, dropped a Ctrl-C pressed while a worker started.
    The resource tracker is started first: starting it unblocks SIGINT (multiprocessing's own
    guard), which would undo the block before the worker is spawned."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class EnvWorker:
    """The parent's handle on one worker process."""

    def __init__(self, ctx, spec: WorkerSpec):
        import dataclasses

        self.index = spec.index
        self.conn, child = ctx.Pipe()
        small = dataclasses.replace(spec, items=[], references={})
        self.process = ctx.Process(target=worker_main, args=(child, small), daemon=True, name=f"ivln-env-{spec.index}")
        with _sigint_held():  # the child starts with Ctrl-C blocked: no traceback while it imports
            self.process.start()
        child.close()
        self.envs = spec.envs
        self.tours: dict[int, str] = {}  # slot -> the tour it is running, for error messages
        self.info: dict = {}
        self._close_sent = False
        self.send("init", spec.items, spec.references)

    def send(self, *cmd) -> None:
        try:
            self.conn.send(cmd)
        except (BrokenPipeError, OSError):
            self._raise_dead()

    def _raise_dead(self, text: str | None = None):
        self.process.join(timeout=5)
        code = self.process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            try:
                how += f" ({signal.Signals(-code).name})"
            except ValueError:
                pass
        running = sorted(self.tours.values(), key=lambda t: (len(t), t))
        doing = f" while running tour{'s' if len(running) > 1 else ''} {', '.join(running)}" if running else ""
        detail = f"\n--- worker traceback ---\n{text.rstrip()}" if text else " (no traceback: the process was killed or crashed)"
        raise WorkerCrashed(f"environment worker {self.index} (pid {self.process.pid}) died with {how}{doing}{detail}")

    def _take(self):
        try:
            msg = self.conn.recv()
        except (EOFError, OSError):
            self._raise_dead()
        if msg[0] == "error":
            self._raise_dead(msg[1])
        return msg

    def receive(self, timeout: float | None = None):
        """The next message; raises WorkerCrashed if the process died first."""
        ready = wait([self.conn, self.process.sentinel], timeout)
        if not ready:
            raise TimeoutError(f"environment worker {self.index} sent nothing for {timeout} s")
        if self.conn in ready or self.conn.poll():
            return self._take()
        self._raise_dead()

    def request_close(self) -> None:
        if self.process.is_alive() and not self._close_sent:
            try:
                self.conn.send(("close",))
            except (BrokenPipeError, OSError):
                pass
            self._close_sent = True

    def close(self, timeout: float = 10.0) -> None:
        if self.process.is_alive():
            self.request_close()
            self.process.join(timeout)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout)
        self.conn.close()


def receive_any(workers: Sequence[EnvWorker], timeout: float | None = None) -> list[tuple[EnvWorker, tuple]]:
    """Messages from whichever workers are ready (at least one); raises on a dead worker."""
    by_conn = {w.conn: w for w in workers}
    by_sentinel = {w.process.sentinel: w for w in workers}
    ready = wait(list(by_conn) + list(by_sentinel), timeout)
    if not ready:
        raise TimeoutError(f"no environment worker answered within {timeout} s")
    out = []
    for obj in ready:
        if obj in by_conn:
            w = by_conn[obj]
            out.append((w, w._take()))
    for obj in ready:
        if obj in by_sentinel:
            w = by_sentinel[obj]
            if w.conn not in ready and not w.conn.poll():
                w._raise_dead()
    return out


def scenes_dir_str(path: str | Path | None) -> str | None:
    return None if path is None else str(path)
