"""``ivln-ce probe run``: an agent's action distributions at p_j on every probe, and their statistics.

For each probe of a ``probe build`` folder and each of its conditions, the agent is teacher-
forced along tau (``teacher.py``) on the evaluation's rollout engine (``driver.py``: K
environments in worker processes, one batched step per tick) and its distribution over the
four actions at p_j is recorded with the mass on the grounding actions (``grounding.py``).
Agents: ``eval.agent=policy`` (the policy of ``policy.*``: a checkpoint through
``policy.checkpoint``, else the seeded random initialisation) or a reference agent with a
known answer (``reference_agents.py``: ``probe_oracle``, ``forward_biased``, ``uniform``).
Records are written per probe as they finish and reused on a rerun only when made from the
same inputs (``run_store.py``); then come ``probe_results.json``, the statistics
(``analysis.py``) and the tables (``tables.py``).

Every condition runs as its own one-episode tour (fresh memory, ``env.oracle_phases=false``,
no step limit that the teacher could reach), so a tour memory holds only tau (and the rollout).

With a rollout (``RolloutRule``, ``--rollout-steps`` > 0, ``agent_rollout.py``) the agent acts on
its own after p_j in the same environment, and each record also gets the rollout's measures
(``rollout_measures.py``; room probes measure d_geo on a sensorless simulator in this process,
``room_distance.py``) and the analysis their effects (``rollout_stats.py``).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ivln_ce import __version__
from ivln_ce.config import ConfigError, PolicyName, check_cuda_device, is_random_init, load_config, resolved
from ivln_ce.data.episodes import Episode, load_episodes
from ivln_ce.data.tours import Tour
from ivln_ce.env.tour_env import TourItem, contained_scene_path
from ivln_ce.fingerprint import code_digest, data_files, digest, fingerprint_config
from ivln_ce.probe.agent_rollout import RolloutRule
from ivln_ce.probe.analysis import RESAMPLES, Analysis
from ivln_ce.probe.driver import ProbeDriver, Reading, Scorer
from ivln_ce.probe.folders import hold_output
from ivln_ce.probe.grounding import correct_mass, probe_actions
from ivln_ce.probe.probe_set import ProbeCase, ProbeSet, read_probe_set
from ivln_ce.probe.record_check import RecordError, check_probe_records, check_record, checksum, text
from ivln_ce.probe.reference_agents import REFERENCE_AGENTS, ReferenceScorer
from ivln_ce.probe.rollout_measures import measure_rollout
from ivln_ce.probe.rollout_stats import analyse_with_rollouts
from ivln_ce.probe.room_distance import RoomDistances
from ivln_ce.probe.run_store import RESULTS, RESULTS_FORMAT, SUMMARY, TABLES, RunStore
from ivln_ce.probe.skills import INTERVENED, ROOM
from ivln_ce.probe.tables import csv_text, latex, markdown
from ivln_ce.probe.teacher import TeacherError, TeacherPlan, TeacherRule, heading_error_deg, plan_teacher
from ivln_ce.rollout.cpus import usable_cpus
from ivln_ce.rollout.engine import RolloutEngine
from ivln_ce.sim import make_simulator
from ivln_ce.sim.base import ACTIONS
from ivln_ce.progress import bar as progress_bar

#: what every probe episode runs with (see the module docstring); the largest allowed step limit
ENGINE_OVERRIDES = ("env.oracle_phases=false", "env.max_agent_steps=100000")


@dataclass(frozen=True)
class RunRequest:
    probes: Path  # the --out folder of `ivln-ce probe build`
    out: Path
    data: Path | None = None  # data root (scene_datasets/); default: the config's data.root
    config: tuple[str, ...] = ()  # config files, in order
    overrides: tuple[str, ...] = ()
    skills: tuple[str, ...] | None = None  # None: every skill of the build
    limit: int = 0  # > 0: `limit` probe ids of each skill, spread evenly over the sorted ids
    teacher: TeacherRule = TeacherRule()
    #: the agent's own actions after p_j (``steps=0``: none, the one-step reading only)
    rollout: RolloutRule = RolloutRule()
    resamples: int = RESAMPLES
    progress: bool = True


@dataclass
class RunReport:
    out: Path
    agent: str
    probes: int
    reused: int = 0
    computed: int = 0
    #: why record files of the selected probes were not reused (reason -> how many): recomputed
    discarded: dict[str, int] = field(default_factory=dict)
    #: reused record files written by a run asked for another selection (--skills, --limit, probe set)
    reused_other_selection: int = 0
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # probe id -> reason
    removed: int = 0
    files: dict[str, Path] = field(default_factory=dict)
    analysis: Analysis | None = None
    engine: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- set-up


def _load(req: RunRequest, *more: str):
    extra = [f"data.root={req.data}"] if req.data is not None else []
    return load_config(list(req.config) or None, [*extra, *req.overrides, *ENGINE_OVERRIDES, *more])


def load_run_config(req: RunRequest):
    """The run's config and the simulator config of the teacher's planning (no sensors: no rendering)."""
    cfg = _load(req)
    agent = cfg.eval.agent
    if agent == "policy":
        if cfg.policy.name == PolicyName.none:
            raise ConfigError("eval.agent=policy needs policy.name (a learned policy); or choose a reference agent: "
                              f"eval.agent={'|'.join(REFERENCE_AGENTS)}")
    elif agent in REFERENCE_AGENTS:
        cfg = _load(req, "simulator.sensors=[]")  # they read the instruction and the probe, no images
    else:
        raise ConfigError(f"eval.agent={agent}: probe run reads an action distribution at p_j; use eval.agent=policy or a "
                          f"probe reference agent ({', '.join(REFERENCE_AGENTS)}). The evaluation's scripted agents "
                          "(oracle, random, forward, stop) act inside the environment workers and give none")
    check_cuda_device("eval.device", cfg.eval.device)
    return cfg, _load(req, "simulator.sensors=[]").simulator


def run_fingerprint(cfg, agent: str, rule: TeacherRule, rollout: RolloutRule = RolloutRule(steps=0)) -> str:
    """The digest of what decides a reading besides the probe itself (see ``run_store.py``)."""
    config = fingerprint_config(resolved(cfg))
    config.get("eval", {}).pop("split", None)
    files: dict[str, str] = {}
    if cfg.eval.agent == "policy":
        p = cfg.policy
        files = data_files({"checkpoint": p.checkpoint, "ddppo_weights": p.ddppo_weights, "rgb_weights": p.rgb_weights,
                            "embeddings": p.embeddings})
        if p.name != PolicyName.map_cma:
            config.pop("mapping", None)
        elif cfg.mapping.semantics.value == "rednet":
            files.update(data_files({"rednet": cfg.mapping.rednet_checkpoint}))
    else:
        config.pop("policy", None)
        config.pop("mapping", None)
    content = {"agent": agent, "config": config, "files": files, "teacher": asdict(rule), "version": __version__,
               "code": code_digest()}
    if rollout.enabled:  # without a rollout the digest is what it was before rollouts existed
        content["rollout"] = rollout.identity()
    return digest(content)


def make_scorer(cfg, probe_set: ProbeSet, by_episode: dict[str, ProbeCase], num_envs: int = 1) -> Scorer:
    if cfg.eval.agent in REFERENCE_AGENTS:
        return ReferenceScorer(cfg.eval.agent, by_episode, float(cfg.simulator.turn_angle), float(cfg.simulator.forward_step))
    from ivln_ce.probe.policy_scorer import PolicyScorer  # torch: only for a learned policy

    vocab = load_episodes(probe_set.vocab_file).vocab
    if vocab is None:
        raise ConfigError(f"{probe_set.vocab_file}: no instruction_vocab; the policy's vocabulary size is unknown")
    threads = max(1, usable_cpus() - num_envs) if str(cfg.eval.device).startswith("cpu") else None
    return PolicyScorer(cfg, len(vocab), device=str(cfg.eval.device), threads=threads)


def agent_label(cfg) -> str:
    if cfg.eval.label:
        return str(cfg.eval.label)
    if cfg.eval.agent != "policy":
        return str(cfg.eval.agent)
    name = cfg.policy.name.value
    return (f"{name}:random-init(seed {cfg.seed})" if is_random_init(cfg.policy.checkpoint)
            else f"{name}:{Path(cfg.policy.checkpoint).name}")


# --------------------------------------------------------------------------- teacher plans


def plan_all(sim_cfg, probes: Sequence[ProbeCase], scenes_dir: Path, rule: TeacherRule, progress: bool
             ) -> dict[tuple[str, int], TeacherPlan | str]:
    """The teacher's plan (or why there is none) per (source episode, point), one scene load per scene."""
    plans: dict[tuple[str, int], TeacherPlan | str] = {}
    todo = sorted({p.path_key: p for p in probes}.values(), key=lambda p: (p.scene_id, p.path_key))
    if not todo:
        return plans
    sim = make_simulator(sim_cfg)
    current = None
    try:
        for p in progress_bar(todo, desc="teacher paths", unit="path", disable=not progress):
            if p.scene_id != current:
                sim.load_scene(str(contained_scene_path(scenes_dir, p.scene_id)))
                current = p.scene_id
            ep = next(iter(p.episodes.values()))
            try:
                plans[p.path_key] = plan_teacher(sim, ep.start_position, ep.start_heading, ep.reference_path,
                                                 p.meta.get("heading"), rule)
            except TeacherError as exc:
                plans[p.path_key] = f"teacher: {exc}"
    finally:
        sim.close()
    return plans


# --------------------------------------------------------------------------- records


def condition_record(probe: ProbeCase, condition: str, reading: Reading, room_distance=None) -> dict[str, Any]:
    """One line of ``probe_results.json``: where the reading comes from, the distribution, the measure,
    and (with a rollout) what the agent then did (``room_distance``: d_geo for room rollouts)."""
    acts = probe_actions(probe.meta)
    m = probe.meta
    target = np.asarray(probe.episodes[condition].reference_path[-1], dtype=np.float64)
    herr = heading_error_deg(reading.heading, m.get("heading"))
    out = {
        "probe_id": probe.probe_id,
        "condition": condition,
        "episode_id": reading.episode_id,
        "skill": probe.skill,
        "intervened": condition == INTERVENED[probe.skill],
        "target_sector": probe.sector,
        "variant": probe.variant,
        "scene_id": probe.scene_id,
        "source_episode": probe.source_episode,
        "point": int(m["point"]),
        "distribution": [round(float(x), 7) for x in reading.distribution],
        "correct_actions": [ACTIONS[a] for a in acts],
        "correct_mass": float(correct_mass(reading.distribution, acts)),
        "teacher_steps": reading.steps,
        "position": [round(float(x), 4) for x in reading.position],
        "distance_to_point": round(float(np.linalg.norm(reading.position - target)), 4),
        "heading_error_deg": None if herr is None else round(herr, 3),
    }
    if reading.rollout is not None:
        out["rollout"] = measure_rollout(probe.skill, m, reading.rollout, room_distance)
    return out


class _Collector:
    """Readings -> per-probe record files, written as soon as a probe's conditions are all read."""

    def __init__(self, store: RunStore, by_episode: dict[str, tuple[ProbeCase, str]], fps: dict[str, str], bar,
                 rooms: RoomDistances | None = None, made_by: dict[str, Any] | None = None):
        self.store, self.by_episode, self.fps, self.bar, self.rooms = store, by_episode, fps, bar, rooms
        self.made_by = made_by or {}
        self.pending: dict[str, dict[str, dict]] = defaultdict(dict)
        self.written: dict[str, dict] = {}

    def __call__(self, reading: Reading) -> None:
        probe, condition = self.by_episode[reading.episode_id]
        got = self.pending[probe.probe_id]
        if condition in got:
            raise RuntimeError(f"episode {reading.episode_id}: read twice")
        rooms = self.rooms.for_scene(probe.scene_id) if self.rooms is not None and probe.skill == ROOM else None
        got[condition] = condition_record(probe, condition, reading, rooms)
        self.bar.update(1)
        if len(got) == len(probe.episodes):
            records = [got[c] for c in probe.episodes]
            self.written[probe.probe_id] = self.store.write(probe.probe_id, self.fps[probe.probe_id], self.made_by, records)
            del self.pending[probe.probe_id]


def resumed(rec: dict[str, Any], probe: ProbeCase, where: str, rollout: RolloutRule) -> None:
    """RecordError unless a record file's content is what this run would write for ``probe``:
    every record passes the schema, its conditions are the probe's in order, and its probe
    fields (scene, source, point, sector, variant, grounding actions) are the probe's own."""
    if "skipped" in rec:
        if "records" in rec:
            raise RecordError(f"{where}: holds both records and a reason for skipping")
        text(rec["skipped"], where, "skipped", 4000)
        return
    records = rec["records"]
    for i, r in enumerate(records):
        check_record(r, f"{where}: records[{i}]")
    check_probe_records(records, where)
    if [r["condition"] for r in records] != list(probe.episodes):
        raise RecordError(f"{where}: records the conditions {[r['condition'] for r in records]}, the probe has {list(probe.episodes)}")
    expect = {"probe_id": probe.probe_id, "skill": probe.skill, "scene_id": probe.scene_id,
              "source_episode": probe.source_episode, "point": int(probe.meta["point"]), "target_sector": probe.sector,
              "variant": probe.variant, "correct_actions": [ACTIONS[a] for a in probe_actions(probe.meta)]}
    for i, r in enumerate(records):
        for key, value in expect.items():
            if r.get(key) != value:
                raise RecordError(f"{where}: records[{i}]: field {key!r} is {r.get(key)!r}, the probe's is {value!r}")
        if ("rollout" in r) != rollout.enabled:
            raise RecordError(f"{where}: records[{i}]: " + ("no rollout, but this run has one" if rollout.enabled
                                                            else "a rollout, but this run has none"))


def _reuse(store: RunStore, probe_set: ProbeSet, fps: dict[str, str], made_by: dict[str, Any], rollout: RolloutRule,
           report: "RunReport") -> dict[str, dict]:
    """The record files of the selected probes that may be reused (see ``run_store.py``); why the
    others may not is counted in ``report.discarded``."""
    done: dict[str, dict] = {}
    for p in probe_set.probes:
        rec, why = store.read(p.probe_id, fps[p.probe_id])
        if rec is not None:
            try:
                resumed(rec, p, str(store._file(p.probe_id)), rollout)
            except RecordError as exc:
                rec, why = None, str(exc)
        if rec is None:
            if why is not None:
                key = why.split(": ", 1)[1] if why.startswith(str(store.out)) and ": " in why else why
                report.discarded[key[:200]] = report.discarded.get(key[:200], 0) + 1
            continue
        done[p.probe_id] = rec
        if rec["made_by"] != made_by:
            report.reused_other_selection += 1
    return done


# --------------------------------------------------------------------------- the run


def run_probes(req: RunRequest, scorer: Scorer | None = None) -> RunReport:
    """Run (or resume) an agent on a probe set; see the module docstring. ``scorer`` replaces the
    agent of ``eval.agent`` (tests); its ``name`` then enters the fingerprint."""
    probe_set = read_probe_set(req.probes, req.skills, req.limit)
    cfg, plan_sim = load_run_config(req)
    scenes_dir = Path(cfg.data.scenes_dir)
    for p in probe_set.probes:  # contain every scene path before any work starts
        contained_scene_path(scenes_dir, p.scene_id)
    agent = getattr(scorer, "name", None) or agent_label(cfg)
    core = run_fingerprint(cfg, agent, req.teacher, req.rollout)
    fps = {p.probe_id: digest([core, p.fingerprint]) for p in probe_set.probes}
    store = RunStore(req.out)
    report = RunReport(Path(req.out), agent, len(probe_set.probes))
    description = {"agent": agent, "eval_agent": cfg.eval.agent, "probes_folder": str(probe_set.folder),
                   "split": probe_set.split, "probe_set": probe_set.fingerprint, "fingerprint": core,
                   "skills": list(probe_set.skills), "limit": req.limit, "teacher": asdict(req.teacher),
                   "rollout": req.rollout.identity(), "config": resolved(cfg)}
    made_by = {"agent": agent, "probe_set": probe_set.fingerprint, "skills": list(probe_set.skills), "limit": req.limit}
    with hold_output(req.out, "probe run"):
        store.open(description)
        done = _reuse(store, probe_set, fps, made_by, req.rollout, report)
        report.reused = len(done)
        todo = [p for p in probe_set.probes if p.probe_id not in done]
        _explain_reuse(report, req.limit)
        if req.progress:
            print(f"ivln-ce probe run: {req.out}: {len(done)} probe record(s) of the same inputs reused from an earlier run, "
                  f"{len(todo)} to compute", file=sys.stderr)
        plans = plan_all(plan_sim, todo, scenes_dir, req.teacher, req.progress)
        runnable = []
        for p in todo:
            plan = plans[p.path_key]
            if isinstance(plan, str):
                done[p.probe_id] = store.write(p.probe_id, fps[p.probe_id], made_by, skipped=plan)
            else:
                runnable.append(p)
        if runnable:
            report.engine = _run_engine(cfg, probe_set, runnable, plans, scenes_dir, store, fps, scorer, req.progress, done,
                                        req.rollout, plan_sim, made_by)
        report.computed = len(todo)
        report.removed = store.remove_stale(set(fps))
        records, skipped = [], {}
        for p in probe_set.probes:
            rec = done[p.probe_id]
            if "skipped" in rec:
                skipped[p.probe_id] = rec["skipped"]
            else:
                records += rec["records"]
        report.skipped = skipped
        results = {"format": RESULTS_FORMAT, **{k: description[k] for k in ("agent", "eval_agent", "probes_folder", "split",
                                                                            "probe_set", "fingerprint", "teacher")},
                   "actions": list(ACTIONS), "records": records, "skipped": skipped}
        if req.rollout.enabled:  # without a rollout the file is what it was before rollouts existed
            results["rollout"] = req.rollout.identity()
        results["checksum"] = checksum(results)
        report.files["results"] = store.write_output(RESULTS, results)
        report.analysis = analyse_with_rollouts(records, agent, req.resamples, int(cfg.seed))
        report.files["summary"] = store.write_output(SUMMARY, report.analysis.as_dict())
        report.files.update(write_tables(store, [report.analysis]))
        store.write_manifest({**description, "complete": True, "probes": len(probe_set.probes), "records": len(records),
                              "skipped": len(skipped), "reused": report.reused, "computed": report.computed,
                              "engine": report.engine})
    return report


def _explain_reuse(report: "RunReport", limit: int) -> None:
    """Notes saying which earlier records were reused and which were recomputed, and why."""
    if report.reused_other_selection:
        report.notes.append(
            f"{report.reused_other_selection} of the {report.reused} reused probe record(s) were written by a run asked for "
            f"another selection (--skills, --limit or probe set; this run: --limit {limit}); they are reused because a "
            "reading depends only on its probe and on the agent, config, teacher and rollout rules and code, which their "
            "fingerprints match")
    reasons = sorted(report.discarded.items(), key=lambda kv: (-kv[1], kv[0]))
    for why, n in reasons[:5]:
        report.notes.append(f"{n} earlier probe record(s) recomputed: {why}")
    if len(reasons) > 5:
        report.notes.append(f"{sum(n for _, n in reasons[5:])} more earlier probe record(s) recomputed for other reasons")


def write_tables(store: RunStore, analyses: Sequence[Analysis]) -> dict[str, Path]:
    return {"md": store.write_text(f"{TABLES}.md", markdown(analyses)),
            "csv": store.write_text(f"{TABLES}.csv", csv_text(analyses)),
            "tex": store.write_text(f"{TABLES}.tex", latex(analyses))}


def _run_engine(cfg, probe_set: ProbeSet, probes: list[ProbeCase], plans, scenes_dir: Path, store: RunStore,
                fps: dict[str, str], scorer: Scorer | None, progress: bool, done: dict[str, dict],
                rollout: RolloutRule = RolloutRule(steps=0), plan_sim=None, made_by: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    by_episode: dict[str, tuple[ProbeCase, str]] = {}
    items: list[TourItem] = []
    episode_plans: dict[str, TeacherPlan] = {}
    for p in sorted(probes, key=lambda p: (p.scene_id, p.probe_id)):  # one scene load per scene and worker, mostly
        for condition, ep in p.episodes.items():
            by_episode[ep.episode_id] = (p, condition)
            episode_plans[ep.episode_id] = plans[p.path_key]
            items.append(_one_episode_tour(ep))
    num_envs = min(int(cfg.eval.num_envs), len(items))
    if scorer is None:
        scorer = make_scorer(cfg, probe_set, {e: pc for e, (pc, _) in by_episode.items()}, num_envs)
    bar = progress_bar(total=len(items), desc=f"probe run {probe_set.split}", unit="episode", disable=not progress)
    rooms = None
    if rollout.enabled and any(p.skill == ROOM for p in probes):
        rooms = RoomDistances(plan_sim if plan_sim is not None else cfg.simulator, scenes_dir)
    collect = _Collector(store, by_episode, fps, bar, rooms, made_by or {})
    driver = ProbeDriver(scorer, episode_plans, collect, rollout, {e: pc.probe_id for e, (pc, _) in by_episode.items()})
    engine = RolloutEngine(items, cfg.simulator, cfg.env, None, scenes_dir, num_envs=num_envs, envs_per_worker=int(cfg.eval.envs_per_worker),
                           success_distance=cfg.metrics.success_distance, obs_keys=scorer.image_keys, seed=int(cfg.seed))
    try:
        with engine:
            engine.run(range(len(items)), driver.decide, on_stream_end=driver.drop)
    finally:
        bar.close()
        if rooms is not None:
            rooms.close()
    if collect.pending:
        left = sorted(collect.pending)
        raise RuntimeError(f"{len(left)} probe(s) have unread conditions after the run, e.g. {left[0]}")
    done.update(collect.written)
    engine.stats.extra.update(getattr(scorer, "timings", {}))
    return engine.stats.as_dict()


def _one_episode_tour(ep: Episode) -> TourItem:
    return TourItem(Tour(ep.episode_id, ep.scan, (ep.episode_id,)), [ep])


#: the rollout measures ``probe run`` prints per skill (the tables hold them all)
HEADLINE = {"stop": ("stopped",), "direction": ("final_in_sector", "stopped"), "object": ("object_error_deg",),
            "room": ("delta_d", "d_geo_end")}


def format_report(report: RunReport) -> str:
    """What ``ivln-ce probe run`` prints: counts, Scores and effects."""
    a = report.analysis
    lines = [f"probe run ({report.agent}): {report.probes} probes; {report.computed} computed, {report.reused} reused"
             + (f", {len(report.skipped)} skipped" if report.skipped else "")
             + (f", {report.removed} stale records removed" if report.removed else "") + f" -> {report.out}"]
    for pid, why in list(report.skipped.items())[:5]:
        lines.append(f"  skipped {pid}: {why}")
    lines += [f"note: {n}" for n in report.notes]
    if a is not None:
        lines.append(f"{'skill':<22} {'probes':>6} {'Score x100':>11}   95 % interval")
        for r in a.scores:
            lines.append(f"{r.skill:<22} {r.probes:>6} {100 * r.score:11.2f}   [{100 * r.low:.2f}, {100 * r.high:.2f}]")
        lines.append(f"{'effect':<44} {'mean':>8}   95 % interval    mixed model: effect, p")
        mixed = {(m.skill, m.treated, m.baseline): m for m in a.mixed}
        for r in a.effects:
            m = mixed.get((r.skill, r.treated, r.baseline))
            mm = "-" if m is None or m.p_value is None else f"{m.effect:+.3f}, p={m.p_value:.2g}"
            lines.append(f"{r.skill + ': ' + r.treated + ' - ' + r.baseline:<44} {r.effect:+8.3f}   [{r.low:+.3f}, {r.high:+.3f}]   {mm}")
        if a.rollout:
            lines.append(f"{'rollout: skill, measure':<44} {'treated':>8} {'baseline':>8} {'effect':>8}   95 % interval")
            for r in a.rollout:
                if ":" not in r.skill and r.measure in HEADLINE.get(r.skill, ()):
                    lines.append(f"{r.skill + ', ' + r.measure + ' (' + r.treated + ' - ' + r.baseline + ')':<44} "
                                 f"{r.mean_treated:8.3f} {r.mean_baseline:8.3f} {r.effect:+8.3f}   [{r.low:+.3f}, {r.high:+.3f}]")
    lines.append("files: " + ", ".join(str(p) for p in report.files.values()))
    return "\n".join(lines)
