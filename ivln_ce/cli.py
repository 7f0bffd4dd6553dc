"""The ``ivln-ce`` command: parse arguments, load the config, call one function per subcommand."""

from __future__ import annotations

import argparse
import json
import math
import re
import runpy
import sys
from pathlib import Path

from ivln_ce import __version__
from ivln_ce.config import ConfigError, load_config, resolved, to_yaml
from ivln_ce.data.jsonio import DataFormatError

REPO_ROOT = Path(__file__).resolve().parent.parent


class UsageError(Exception):
    pass


# --------------------------------------------------------------------------- subcommands


def cmd_demo(args: argparse.Namespace) -> int:
    from ivln_ce.evaluation.demo import format_table, run_demo

    data, results = Path(args.data), Path(args.out)
    print(f"ivln-ce demo: tiny synthetic benchmark in {data}/ (built if missing), reference agents on val_unseen -> {results}/")
    rows = run_demo(data, results, seed=args.seed, workers=args.workers, benchmark_seed=args.benchmark_seed)
    print(format_table(rows))
    print(f"\nTL/NE in metres, the rest x100. Pictures: {results}/tour_<agent>.png (agent, oracle and reference paths), "
          f"{results}/view.png (RGB | depth | semantics).\nRe-score a log: ivln-ce score --gt {data / 'gt_ndtw.json'} "
          f"--agent {results / 'dtw_data_ckpt_random_val_unseen.json'} --split val_unseen --per-tour")
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from ivln_ce.evaluation.scoring import ScoreRequest, format_score_text, score_files, score_report

    overrides = list(args.overrides)
    if args.mode is not None:
        overrides.append(f"metrics.tndtw.variant={args.mode}")
    if args.d_th is not None:
        overrides.append(f"metrics.tndtw.d_th={args.d_th}")
    if args.on_infeasible is not None:
        overrides.append(f"metrics.tndtw.on_infeasible={args.on_infeasible}")
    cfg = load_config(args.config, overrides)
    t = cfg.metrics.tndtw
    req = ScoreRequest(
        gt=Path(args.gt),
        agent=Path(args.agent),
        split=args.split,
        variant=t.variant.value,
        d_th=float(t.d_th),
        on_infeasible=t.on_infeasible.value,
        distance=t.distance.value,
    )
    result = score_files(req, show_progress=not args.json)
    if args.json:
        print(json.dumps(score_report(result, req, resolved(cfg)), indent=2))
    else:
        print(format_score_text(result, req, args.per_tour))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from ivln_ce.evaluation.evaluator import evaluate, format_summary
    from ivln_ce.rollout.worker import WorkerCrashed

    cfg = load_config(args.config, args.overrides)
    if cfg.eval.agent == "policy":
        import torch  # noqa: F401  (a learned policy needs it: said before any work, see main)
    try:
        summary = evaluate(cfg)
    except WorkerCrashed as exc:
        print(f"ivln-ce eval: {exc}\nFinished tours are kept in {cfg.results_dir}; run the same command again to resume.",
              file=sys.stderr)
        return 1
    if summary is None:  # a non-zero torchrun rank
        return 0
    if "checkpoints" in summary:  # a checkpoint folder
        from ivln_ce.evaluation.checkpoints import format_checkpoint_table

        print(format_checkpoint_table(summary["checkpoints"], summary["best"]), end="")
        best = summary["best"]
        print(f"best: ckpt.{best['checkpoint']}.pth by t-nDTW (table: {summary['table']})")
        return 0
    print(format_summary(summary, cfg.results_dir))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from ivln_ce.rollout.worker import WorkerCrashed
    from ivln_ce.training.store import StoreError
    from ivln_ce.training.trainer import TrainError, train as train_il

    cfg = load_config(args.config, args.overrides)
    train, rl_errors = train_il, ()
    if cfg.train.trainer.value == "rl":  # reinforcement fine-tuning (after Jain et al. 2019) lives in rl/, above training/
        from ivln_ce.rl.rewards import RewardError  # an episode the rewards are undefined for (a goal off the navmesh)
        from ivln_ce.rl.trainer import train_rl

        train, rl_errors = train_rl, (RewardError,)
    try:
        summary = train(cfg)
    except rl_errors as exc:
        raise UsageError(str(exc)) from exc
    except WorkerCrashed as exc:
        print(f"ivln-ce train: {exc}\nRun the same command again to resume from the last checkpointed phase.", file=sys.stderr)
        return 1
    except TrainError as exc:
        raise UsageError(str(exc)) from exc
    except StoreError as exc:  # the run's own collected data is damaged or gone: it cannot be rebuilt
        raise UsageError(f"{exc}\nThe trajectory store of {cfg.train.out_dir} is damaged or missing; the run cannot go on "
                         f"with it: train into another train.out_dir") from exc
    if summary is None:
        return 0
    print(f"{summary['policy']}: {summary['rounds']} round(s), {summary['optimizer_steps']} optimizer steps, "
          f"{summary['episodes_collected']} episodes ({summary['steps_collected']} steps) collected"
          + (" (stopped by train.max_steps)" if summary["stopped_by_max_steps"] else "")
          + f" -> {cfg.train.out_dir} (checkpoints {', '.join(summary['checkpoints'][-3:]) or 'none'}; TensorBoard: tensorboard --logdir {cfg.train.out_dir}/tb)")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from ivln_ce.reproduce.pipeline import reproduce, reproduce_coverage

    coverage_only = {"--splits": args.splits, "--max-tours": args.max_tours, "--max-k": args.max_k}
    if args.table == "coverage":
        cov = reproduce_coverage(args.scale, args.out, data=args.data, splits=args.splits or ("train", "val_unseen"),
                                 max_tours=args.max_tours or 0, max_k=args.max_k or 20, num_envs=args.num_envs)
        for c in cov["checks"]:
            ours = "n/a" if c["mean"] is None else f"{100 * c['mean']:.1f} % [{100 * c['low']:.1f}, {100 * c['high']:.1f}]"
            print(f"{c['split']}: {c['quantity']} after {c['k']} episodes {ours} (paper > {100 * c['threshold']:.0f} %): {c['verdict']}")
        print(f"coverage: {', '.join(cov['files'])} ({cov['seconds'] / 60:.1f} min)")
        return 0
    given = [flag for flag, value in coverage_only.items() if value is not None]
    if given:
        raise UsageError(f"{', '.join(given)}: only for `ivln-ce reproduce coverage`")
    result = reproduce(args.table, args.scale, args.out, seeds=args.seeds, device=args.device, data=args.data, num_envs=args.num_envs)
    for v in result["tables"]["verdicts"]:
        print(v)
    print(f"tables: {', '.join(str(f) for f in result['tables']['files'])}; run notes: {Path(args.out) / 'README.md'}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from ivln_ce.data.jsonio import write_json
    from ivln_ce.reproduce.stats import compare, comparison_json, format_comparison
    from ivln_ce.viz.paired import display_names, pooled_name
    from ivln_ce.viz.report_side import read_side

    dirs = args.results
    if len(dirs) % 2:
        raise UsageError(f"results folders come in pairs, A B [A2 B2 ...] (one pair per training seed); got {len(dirs)}")
    _check_bootstrap_options(args)
    _judgements(args, {})  # --paper, --null, --margin and --expect checked before anything is read
    _labels_have_folders(args, dirs + (args.contrast or []))
    pairs = [(read_side(a, args.split, args.label_a), read_side(b, args.split, args.label_b))
             for a, b in zip(dirs[::2], dirs[1::2])]
    if args.contrast is not None:
        return _compare_contrast(args, pairs)
    result = compare(pairs, resamples=args.resamples, seed=args.seed, level=args.level, tndtw=args.tndtw)
    names, legend = display_names(pairs[0])
    for line in legend:
        print(line)
    verdicts = _judgements(args, result.intervals)
    print(format_comparison(result, names, per_tour=not args.summary))
    for m, v in verdicts.items():
        print(f"{m}: {v.word} ({_claimed(args, pooled_name(f'{names[0]} - {names[1]}', len(pairs)))}; {v.method} [{v.low:+.2f}, {v.high:+.2f}])")
    out = Path(args.out or f"compare_{args.split}.json")
    write_json(out, comparison_json(result, verdicts), indent=2)
    print(f"wrote {out}")
    return 0


#: the largest seed the commands take: numpy's legacy generators and torch.manual_seed accept
#: every value in [0, 2**32 - 1]
MAX_SEED = 2**32 - 1


def _check_seed(flag: str, value: int) -> None:
    if not 0 <= value <= MAX_SEED:
        raise UsageError(f"{flag} must be an integer in [0, {MAX_SEED}], got {value}")


def _check_bootstrap_options(args: argparse.Namespace) -> None:
    """--resamples, --seed and --level of a bootstrap, before any file is read."""
    from ivln_ce.viz.paired import check_resamples

    try:
        check_resamples(args.resamples, "--resamples")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _check_seed("--seed", args.seed)
    if not (math.isfinite(args.level) and 0 < args.level < 1):
        raise UsageError(f"--level: the interval's level must lie in (0, 1), got {args.level}")


def _judgements(args: argparse.Namespace, intervals: dict) -> dict:
    """Per metric the verdict of ``reproduce.stats.judge`` for the claim the options state:
    ``--paper D`` (the paper's t-nDTW difference; the other metrics take its sign), ``--null``
    (no effect within ``--margin``), or ``--expect`` alone (a sign). None stated: no verdicts."""
    from ivln_ce.reproduce.stats import judge

    if args.paper is not None and args.null:
        raise UsageError("--paper claims an effect and --null claims none: give one of them")
    if args.paper is not None:
        if not math.isfinite(args.paper) or args.paper == 0:
            raise UsageError(f"--paper must be a finite non-zero difference (a claim of no effect is --null), got {args.paper}")
        if args.expect and (args.paper > 0) != (args.expect == "greater"):
            raise UsageError(f"--paper {args.paper:+g} and --expect {args.expect} claim opposite signs")
    if not math.isfinite(args.margin) or args.margin <= 0:
        raise UsageError(f"--margin must be a positive number of points, got {args.margin}")
    out = {}
    for m, iv in intervals.items():
        if args.null:
            out[m] = judge(iv, null=True, margin=args.margin)
        elif args.paper is not None:
            out[m] = judge(iv, paper=args.paper) if m == "t-nDTW" else judge(iv, direction=1 if args.paper > 0 else -1)
        elif args.expect:
            out[m] = judge(iv, direction=1 if args.expect == "greater" else -1)
    return out


def _claimed(args: argparse.Namespace, difference: str) -> str:
    if args.null:
        return f"claimed {difference} = 0 within +-{args.margin:g}"
    if args.paper is not None:
        return f"claimed {difference} = {args.paper:+g} (t-nDTW; its sign for the other metrics)"
    return f"expected {difference} {'>' if args.expect == 'greater' else '<'} 0"


def _labels_have_folders(args: argparse.Namespace, specs: list[str]) -> None:
    """--label-a/--label-b pick a run in results folders; refuse one that no folder of its side takes."""
    from ivln_ce.viz.report_side import reads_as_report

    for flag, label, side in (("--label-a", args.label_a, specs[::2]), ("--label-b", args.label_b, specs[1::2])):
        if label is not None and all(reads_as_report(s) for s in side):
            raise UsageError(f"{flag}: picks a run in a results folder, but every {flag[-1].upper()} given is a side of a "
                             "saved report (one run each)")


def _compare_contrast(args: argparse.Namespace, pairs: list) -> int:
    from ivln_ce.data.jsonio import write_json
    from ivln_ce.viz.paired import contrast, contrast_json, display_names, format_contrast, pooled_name
    from ivln_ce.viz.report_side import read_side

    more = args.contrast
    if len(more) != 2 * len(pairs):
        raise UsageError(f"--contrast takes one pair C D per pair A B (one per seed): {len(pairs)} pair(s) need "
                         f"{2 * len(pairs)} folders, got {len(more)}")
    second = [(read_side(c, args.split, args.label_a), read_side(d, args.split, args.label_b))
              for c, d in zip(more[::2], more[1::2])]
    result = contrast(pairs, second, resamples=args.resamples, seed=args.seed, level=args.level, tndtw=args.tndtw)
    names, legend = display_names((*pairs[0], *second[0]), width=11)  # a column holds 'A - B' in 25
    for line in legend:
        print(line)
    print(format_contrast(result, names))
    report = contrast_json(result)
    verdicts = _judgements(args, result.intervals)
    for m, v in verdicts.items():
        what = pooled_name(f'({names[0]} - {names[1]}) - ({names[2]} - {names[3]})', len(pairs))
        print(f"{m}: {v.word} ({_claimed(args, what)}; {v.method} "
              f"[{v.low:+.2f}, {v.high:+.2f}])")
    if verdicts:
        report["verdicts"] = {m: dict(v.__dict__) for m, v in verdicts.items()}
    out = Path(args.out or f"contrast_{args.split}.json")
    write_json(out, report, indent=2)
    print(f"wrote {out}")
    return 0


def cmd_config_show(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides)
    print(to_yaml(cfg), end="")
    return 0


def cmd_data_validate(args: argparse.Namespace) -> int:
    from ivln_ce.data.episodes import check_against_vocab, load_episodes, load_reference_trajectories
    from ivln_ce.data.tours import join_tours, load_tours

    known = None
    if args.scenes_dir:
        root = Path(args.scenes_dir)
        known = {p.stem for p in root.rglob("*.glb")}
    ds = load_episodes(args.episodes, known_scans=known)
    print(f"{args.episodes}: {len(ds)} episodes, {len({e.trajectory_id for e in ds})} paths, {len(ds.scans())} scenes")
    vocab = ds.vocab
    if vocab is not None:
        bad = check_against_vocab(ds, vocab)
        print(f"vocabulary: {len(vocab)} words; re-tokenising the instructions "
              + ("matches every stored token list" if not bad else f"differs for episodes {bad}"))
    if args.references:
        refs = load_reference_trajectories(args.references)
        missing = [e.episode_id for e in ds if e.episode_id not in refs]
        print(f"{args.references}: {len(refs)} reference trajectories; {len(missing)} episodes without one")
    if args.tours:
        if not args.split:
            raise UsageError("--tours needs --split")
        tours = load_tours(args.tours, args.split)
        join = join_tours(ds, tours)
        print(f"{args.tours} [{args.split}]: {len(tours)} tours; {len(join.tour_of)} episodes covered, "
              f"{len(join.dropped_episodes)} dropped, {len(join.unknown_entries)} unknown tour entries")
    print("OK")
    return 0


def cmd_scene_generate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ivln_ce.scenes.layout import generate_house
    from ivln_ce.scenes.mesh import save_scene

    seeds = range(args.seed, args.seed + args.count)
    for seed in tqdm(seeds, desc="houses", unit="house", disable=args.count < 2 or None):
        layout = generate_house(seed)
        path = save_scene(layout, args.out)
        (x0, z0), (x1, z1) = layout.bounds
        print(f"{path}: {x1 - x0:.1f} x {z1 - z0:.1f} m, {len(layout.rooms)} rooms, {len(layout.doors)} doors, "
              f"{len(layout.objects)} objects")
    return 0


def _scene_file(scene: str) -> Path:
    """A scene argument: a ``.glb`` file, or a folder holding exactly one."""
    path = Path(scene)
    if path.is_dir():
        found = sorted(path.glob("*.glb")) or sorted(path.rglob("*.glb"))
        if len(found) != 1:
            what = "no .glb file" if not found else f"{len(found)} .glb files (e.g. {[str(f) for f in found[:3]]})"
            raise UsageError(f"{path}: a folder with {what}; give the scene's .glb file")
        return found[0]
    if not path.exists():
        raise UsageError(f"{path}: no such scene file")
    if path.suffix != ".glb":
        raise UsageError(f"{path}: expected a scene .glb file (with its .semantic.json beside it)")
    return path


def _scene_sim(scene: str, overrides: list[str]):
    from ivln_ce.sim.embedded import EmbeddedSimulator

    cfg = load_config(None, overrides).simulator
    sim = EmbeddedSimulator(cfg)
    sim.load_scene(str(_scene_file(scene)))
    return sim


def cmd_scene_view(args: argparse.Namespace) -> int:
    import math

    import numpy as np

    from ivln_ce.viz.scenes import panels, save_image

    sim = _scene_sim(args.scene, [f"simulator.renderer={args.renderer}", *args.overrides])
    if args.x is not None and args.z is not None:
        pos = sim.snap_point([args.x, 0.0, args.z])
    else:
        pos = sim.sample_navigable_point(np.random.default_rng(args.seed))
    sim.set_agent_state(pos, math.radians(args.heading))
    obs = sim.get_observations()
    out = save_image(args.out, panels(obs))
    print(f"{out}: view from x={pos[0]:.2f} z={pos[2]:.2f} heading={args.heading:g} deg ({sim.config.renderer.value})")
    sim.close()
    return 0


def cmd_scene_topdown(args: argparse.Namespace) -> int:
    from ivln_ce.viz.scenes import save_image, topdown_image

    sim = _scene_sim(args.scene, ["simulator.sensors=[]"])
    out = save_image(args.out, topdown_image(sim.scene.layout, sim.nav, px_per_m=args.scale))
    print(f"{out}: {len(sim.scene.layout.rooms)} rooms, navigable area {sim.nav.navigable.sum() * sim.nav.cell ** 2:.1f} m^2")
    return 0


def cmd_data_synth(args: argparse.Namespace) -> int:
    from ivln_ce.benchmark.synthetic import build_synthetic

    m = build_synthetic(args.preset, args.out, seed=args.seed, workers=args.workers)
    eps = ", ".join(f"{k} {v}" for k, v in m["episodes"].items())
    print(f"{args.out}: preset {m['preset']} (seed {m['seed']}), episodes: {eps}; built in {m['build_seconds']} s")
    return 0


def cmd_data_tours(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ivln_ce.benchmark.tours import distance_provider
    from ivln_ce.data.episodes import load_episodes
    from ivln_ce.data.tour_generation import generate_tours, one_tour_per_episode, tour_statistics
    from ivln_ce.data.tours import write_tours

    if args.one_per_episode == (args.distance is not None):
        raise UsageError("give --distance geodesic|euclidean (tours chained by distance) or --one-per-episode "
                         "(every episode its own tour), not both")
    ds = load_episodes(args.episodes)
    split = args.split or Path(args.episodes).name.split(".")[0]
    if args.one_per_episode:
        gen = one_tour_per_episode(ds, split)
        how = "one tour per episode"
    else:
        distances = distance_provider(ds, args.distance, args.scenes_dir, args.max_dy)
        gen = generate_tours(ds, distances, split, seed=args.seed, solver=args.solver,
                             progress=lambda it: tqdm(it, desc="scenes", unit="scene"))
        if hasattr(distances, "close"):
            distances.close()
        how = f"{args.distance} distance{'' if args.distance == 'geodesic' else f', |dy| < {args.max_dy} m'}"
    write_tours(args.out, {split: gen.to_json_split()})
    s = tour_statistics(gen.tours, len(ds))
    print(f"{args.out}: split {split}: {s['tours']} tours over {s['scenes']} scenes, {s['episodes']} episodes; "
          f"length mean {s['mean_length']:.1f}, min {s['min_length']}, max {s['max_length']}, SD {s['sd_length']:.1f} "
          f"({how})")
    return 0


def _check_simulator_overrides(args: argparse.Namespace, command: str, scenes_flag: str) -> None:
    """Commands that build data take ``simulator.*`` overrides only, and only with scenes."""
    bad = [o for o in args.overrides if not o.startswith("simulator.")]
    if bad:
        raise UsageError(f"only simulator.* overrides apply to {command}, got {bad}")
    if args.overrides and not args.scenes_dir:
        raise UsageError(f"simulator.* overrides need {scenes_flag} (without scenes no simulator runs)")


def cmd_data_r4r(args: argparse.Namespace) -> int:
    from ivln_ce.benchmark.r4r import R4RRequest, build_r4r

    _check_simulator_overrides(args, "data r4r", "--scenes")
    req = R4RRequest(episodes=Path(args.episodes), out=Path(args.out), distance=args.distance, threshold=args.threshold,
                     scenes_dir=Path(args.scenes_dir) if args.scenes_dir else None, max_per_scene=args.max_per_scene,
                     seed=args.seed, max_dy=args.max_dy, padded_length=args.padded_length,
                     instructions_per_path=args.instructions_per_path, overrides=tuple(args.overrides))
    result = build_r4r(req)
    print(result.table.read_text(), end="")
    refs = f", references {result.references}" if result.references else " (no simulator: no reference trajectories)"
    print(f"{result.episodes}: {result.statistics.joined.instructions} episodes{refs}; table {result.table}")
    return 0


def cmd_data_perturb(args: argparse.Namespace) -> int:
    from ivln_ce.benchmark.perturb import PerturbRequest, build_perturbed

    _check_simulator_overrides(args, "data perturb", "--scenes-dir")
    if args.detour_offset is not None and len(args.detour_offset) != 2:
        raise UsageError("--detour-offset takes two numbers: MIN MAX (m)")
    req = PerturbRequest(episodes=Path(args.episodes), out=Path(args.out), kinds=args.kinds, seed=args.seed,
                         scenes_dir=Path(args.scenes_dir) if args.scenes_dir else None,
                         other_path_threshold=args.other_path_threshold,
                         detour_offset=tuple(args.detour_offset or (1.0, 2.0)), padded_length=args.padded_length,
                         overrides=tuple(args.overrides))
    result = build_perturbed(req)
    print(result.table, end="")
    refs = f", references {result.references} ({result.reused_references} reused, {result.walked_references} walked)" \
        if result.references else " (no references: neither the input's nor a simulator's)"
    print(f"{result.episodes}: {result.count} episodes{refs}; statistics {result.statistics_file}")
    return 0


def cmd_data_stats(args: argparse.Namespace) -> int:
    from ivln_ce.benchmark.tours import dataset_statistics, format_statistics
    from ivln_ce.data.episodes import load_episodes
    from ivln_ce.data.tours import load_tours

    ds = load_episodes(args.episodes)
    if len(ds) == 0:
        raise DataFormatError(f"{args.episodes}: no episodes to summarise")
    split = args.split or Path(args.episodes).name.split(".")[0]
    stats = dataset_statistics(ds, load_tours(args.tours, split))
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        print(format_statistics(split, stats))
    return 0


def cmd_probe_build(args: argparse.Namespace) -> int:
    from ivln_ce.probe.build import BuildRequest, build_probes, format_report
    from ivln_ce.probe.free_space import FreeSpaceRule
    from ivln_ce.probe.skills import parse_skills

    bad = [o for o in args.overrides if not o.startswith(("simulator.", "data."))]
    if bad:
        raise UsageError(f"only simulator.* and data.* overrides apply to probe build, got {bad}")
    if not 0 < args.free_distance <= 50:  # NaN fails too
        raise UsageError(f"--free-distance: expected a positive number of metres up to 50, got {args.free_distance}")
    req = BuildRequest(data=Path(args.data), split=args.split, out=Path(args.out), skills=parse_skills(args.skills),
                       rule=FreeSpaceRule(distance=args.free_distance), overrides=tuple(args.overrides))
    print(format_report(build_probes(req)))
    return 0


def cmd_probe_run(args: argparse.Namespace) -> int:
    from ivln_ce.probe.agent_rollout import RolloutRule
    from ivln_ce.probe.run import RunRequest, format_report, run_probes
    from ivln_ce.probe.skills import parse_skills
    from ivln_ce.probe.teacher import TeacherRule
    from ivln_ce.rollout.worker import WorkerCrashed

    from ivln_ce.probe.probe_set import MAX_PROBES

    if not 0 <= args.limit <= MAX_PROBES:
        raise UsageError(f"--limit must be >= 0 and at most {MAX_PROBES}, got {args.limit}")
    if not 0 < args.waypoint_radius <= 10:  # NaN fails too
        raise UsageError(f"--waypoint-radius: expected a positive number of metres up to 10, got {args.waypoint_radius}")
    try:
        rollout = RolloutRule(steps=args.rollout_steps, policy=args.rollout_policy, seed=args.rollout_seed)
    except ValueError as exc:
        raise UsageError(f"--rollout-*: {exc}") from None
    req = RunRequest(probes=Path(args.probes), out=Path(args.out), data=Path(args.data) if args.data else None,
                     config=tuple(args.config or ()), overrides=tuple(args.overrides),
                     skills=parse_skills(args.skills) if args.skills else None, limit=args.limit, teacher=TeacherRule(waypoint_radius=args.waypoint_radius),
                     rollout=rollout)
    try:
        print(format_report(run_probes(req)))
    except WorkerCrashed as exc:
        print(f"ivln-ce probe run: {exc}\nFinished probes are kept in {args.out}; run the same command again to resume.",
              file=sys.stderr)
        return 1
    return 0


def cmd_probe_tables(args: argparse.Namespace) -> int:
    from ivln_ce.probe.results import check_resamples, tables_from_runs

    check_resamples(args.resamples)
    files = tables_from_runs([Path(r) for r in args.runs], Path(args.out), resamples=args.resamples)
    print(files["md"].read_text())
    print("files: " + ", ".join(str(f) for f in files.values()))
    return 0


def cmd_probe_figures(args: argparse.Namespace) -> int:
    from ivln_ce.probe.figures import format_report, make_figures
    from ivln_ce.probe.results import check_resamples

    check_resamples(args.resamples)
    if not 1 <= args.length_bin <= 100_000:
        raise UsageError(f"--length-bin: expected an integer in [1, 100000], got {args.length_bin}")
    rep = make_figures([Path(r) for r in args.runs], Path(args.out), Path(args.probes) if args.probes else None,
                       bin_width=args.length_bin, resamples=args.resamples)
    print(format_report(rep))
    return 0


def cmd_train_rednet(args: argparse.Namespace) -> int:
    from ivln_ce.training.rednet import RedNetTrainConfig, train_rednet

    cfg = RedNetTrainConfig(out=args.out, preset=args.preset, seed=args.seed, size=args.size, frames_per_house=args.frames_per_house,
                            encoder_depth=args.encoder_depth, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                            max_train_houses=args.max_train_houses, max_eval_houses=args.max_eval_houses)
    report = train_rednet(cfg, resume=not args.no_resume)
    worst = sorted(((v, k) for k, v in report["per_class_iou"].items() if v is not None))[:3]
    print(f"RedNet-{cfg.encoder_depth} on {report['train_frames']} frames: val_unseen mIoU {100 * report['miou']:.1f} "
          f"(worst: {', '.join(f'{k} {100 * v:.1f}' for v, k in worst)}); report: {Path(args.out) / 'report.json'}")
    return 0


def cmd_train_compat(args: argparse.Namespace) -> int:
    from ivln_ce.fidelity.compat_features import ViewSettings
    from ivln_ce.fidelity.compat_train import CompatTrainConfig, CompatTrainError, train_compat

    if len(args.mix) != 3:
        raise UsageError("--mix takes three weights: GROUND_TRUTH INSTRUCTION TRAJECTORY (the seed: 2 1 1)")
    views = ViewSettings(spacing=args.spacing, max_viewpoints=args.max_viewpoints, views=args.views, size=args.size,
                         rgb_weights=args.rgb_weights or "")
    cfg = CompatTrainConfig(episodes=args.episodes, scenes_dir=args.scenes_dir, out=args.out, perturbed=args.perturbed,
                            val_episodes=args.val_episodes, val_perturbed=args.val_perturbed, epochs=args.epochs,
                            batch_size=args.batch_size, lr=args.lr, seed=args.seed, gamma=args.gamma, beta=args.beta,
                            mix=tuple(args.mix), resume_every=args.resume_every, device=args.device, views=views)
    try:
        summary = train_compat(cfg)
    except CompatTrainError as exc:
        raise UsageError(str(exc)) from exc
    last = summary["history"][-1] if summary["history"] else {}
    val = f", val AUC {last['val_auc']:.3f}" if last.get("val_auc") is not None else ""
    print(f"{summary['checkpoint']}: {summary['epochs']} epoch(s), {summary['steps']} steps{val} "
          f"(TensorBoard: tensorboard --logdir {args.out}/tb)")
    return 0


def cmd_score_instructions(args: argparse.Namespace) -> int:
    from ivln_ce.fidelity.compat_score import ScoreRequest, format_report, score_instructions

    req = ScoreRequest(checkpoint=Path(args.checkpoint), episodes=[Path(e) for e in args.episodes],
                       scenes_dir=Path(args.scenes_dir), out=Path(args.out), labels=args.labels,
                       cache=Path(args.feature_cache) if args.feature_cache else None, batch_size=args.batch_size,
                       device=args.device, rgb_weights=args.rgb_weights)
    report = score_instructions(req)
    print(format_report(report), end="")
    print(f"scores -> {args.out}")
    return 0


def cmd_viz_maps(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ivln_ce.viz.maps import render_map_records

    written = render_map_records(args.results, args.out, progress=lambda it: tqdm(it, desc="maps", unit="image"))
    if not written:
        raise UsageError(f"no map records under {args.results} (evaluate with mapping.save_images=true)")
    print(f"{len(written)} map images, e.g. {written[0]}")
    return 0


def cmd_viz_report(args: argparse.Namespace) -> int:
    from ivln_ce.viz.report import build_report

    probes = None
    if args.probes:
        from ivln_ce.probe.report_part import MAX_EXAMPLES_PER_SKILL, report_part

        if not 0 <= args.probe_examples <= MAX_EXAMPLES_PER_SKILL:
            raise UsageError(f"--probe-examples: expected an integer in [0, {MAX_EXAMPLES_PER_SKILL}], got {args.probe_examples}")
        build = Path(args.probe_build) if args.probe_build else None
        if args.probe_data and build is None:
            raise UsageError("--probe-data renders the frames of the probes of --probe-build: give the `probe build` folder too")
        frames = Path(args.probe_data) if args.probe_data else None
        probes = lambda folder: report_part(Path(args.probes), folder, build, per_skill=args.probe_examples,  # noqa: E731
                                            frames_data=frames)
    elif args.probe_build or args.probe_data:
        raise UsageError("--probe-build and --probe-data go with --probes (the `probe run` folder)")
    if not args.results and not (args.probes and args.out):
        raise UsageError("give --results (an evaluation), or --probes with --out (a probe report alone)")
    if args.compare_label is not None and args.compare is None:
        raise UsageError("--compare-label: only with --compare OTHER_RESULTS")
    if args.compare is not None and not args.results:
        raise UsageError("--compare pairs the runs of --results with another results folder: give --results")
    rep = build_report(args.results, args.out, label=args.label, split=args.split, data_root=args.data, workers=args.workers,
                       probes=probes, compare_with=args.compare, compare_label=args.compare_label)
    for note in rep.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"report of {', '.join(rep.runs) or 'a probe run'}: {len(rep.pages)} tour pages, {rep.episodes} episodes, {rep.images} images, "
          f"{rep.size_bytes / 1e6:.1f} MB in {rep.seconds:.1f} s\nopen {rep.index.resolve().as_uri()}")
    return 0


def cmd_viz_table(args: argparse.Namespace) -> int:
    from ivln_ce.viz.table import format_table, results_table

    rows = results_table(args.runs, split=args.split, label=args.label, ignore=args.ignore)
    print(format_table(rows, args.format, digits=args.digits), end="")
    return 0


def cmd_viz_curves(args: argparse.Namespace) -> int:
    from ivln_ce.viz.curves import plot_curves

    out = Path(args.out) if args.out else Path(args.train_dirs[0]) / "curves.png"
    print(f"wrote {plot_curves(args.train_dirs, out)}")
    return 0


def cmd_viz_positions(args: argparse.Namespace) -> int:
    from ivln_ce.data.jsonio import write_json
    from ivln_ce.viz.paired import display_names
    from ivln_ce.viz.positions import by_position_seeds, format_positions, positions_json, read_positions, trend_seeds

    n = len(args.results)
    alone = args.alone or n == 1
    if not alone and n % 2:
        raise UsageError(f"one results folder, or pairs A B [A2 B2 ...] (one per training seed), or --alone; got {n} folders")
    if alone and args.label_b is not None:
        raise UsageError("--label-b names the run in B folders; there are none without pairs")
    labels = (args.label_a,) * n if alone else (args.label_a, args.label_b) * (n // 2)
    tables = [read_positions(r, args.split, lab, args.metric) for r, lab in zip(args.results, labels)]
    pairs = [(t, None) for t in tables] if alone else list(zip(tables[0::2], tables[1::2]))
    options = dict(width=args.width, resamples=args.resamples, seed=args.seed, level=args.level)
    bins, change = by_position_seeds(pairs, **options), trend_seeds(pairs, **options)
    names, legend = display_names(tables[:2])
    for line in legend:
        print(line)
    print(format_positions(bins, args.metric, names, change))
    if args.out:
        write_json(Path(args.out), positions_json(bins, pairs, args.level, args.resamples, change), indent=2)
        print(f"wrote {args.out}")
    return 0


def cmd_known_maps(args: argparse.Namespace) -> int:
    import math

    from tqdm import tqdm

    from ivln_ce.mapping.known import KnownMaps, build_known_map, known_map_of_scene

    root = Path(args.scenes)
    scenes = sorted(root.rglob("*.glb")) if root.is_dir() else [root]
    if not scenes or not all(p.suffix == ".glb" and p.exists() for p in scenes):
        raise UsageError(f"{root}: no generated .glb scene found")
    predicted = args.rednet is not None
    if predicted and args.method == "mesh":
        raise UsageError("predicted semantics come from a visit: use --method visit with --rednet")
    source = args.source or ("predicted_semantics" if predicted else "gt_semantics")
    known = KnownMaps(args.out, source)
    segmenter = None
    if predicted:
        from ivln_ce.models.official_weights import load_rednet
        from ivln_ce.models.rednet import RedNet, RedNetSegmenter

        model = RedNet(depth=args.rednet_depth)
        print(load_rednet(model, args.rednet))
        segmenter = RedNetSegmenter(model)
    sensors = "[rgb,depth,semantic]" if predicted else "[depth,semantic]"
    done = skipped = 0
    for glb in tqdm(scenes, desc=f"known maps ({args.method}, {source})", unit="scene"):
        scan = glb.stem
        if known.path(scan).exists() and not args.overwrite:
            skipped += 1
            continue
        sim = _scene_sim(str(glb), [f"simulator.sensors={sensors}", *args.overrides])
        if args.method == "mesh":
            xyz, sem = known_map_of_scene(sim.scene, sim.nav.floor_y, sim.config.sensor_height)
            known.save(scan, xyz, sem)
        else:
            build_known_map(sim, scan, known, args.spacing, args.turns, math.radians(sim.config.depth.hfov), segmenter)
        sim.close()
        done += 1
    print(f"{done} known maps written to {Path(args.out) / source}/ ({skipped} already there; --overwrite rebuilds them)")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    script = REPO_ROOT / "scripts" / f"bench_{args.name}.py"
    if not script.exists():
        available = sorted(p.stem[len("bench_"):] for p in (REPO_ROOT / "scripts").glob("bench_*.py"))
        raise UsageError(f"no benchmark {args.name!r} (scripts/ is needed; available: {available})")
    sys.argv = [str(script), *args.bench_args]
    runpy.run_path(str(script), run_name="__main__")
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ivln-ce", description="Iterative VLN in continuous environments (IR2R-CE).")
    p.add_argument("--version", action="version", version=f"ivln-ce {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="build the tiny benchmark and evaluate the reference agents")
    d.add_argument("--data", default="data/synthetic_tiny", help="benchmark folder (built if missing)")
    d.add_argument("--out", default="results/demo", help="results and pictures")
    d.add_argument("--seed", type=int, default=None,
                   help="the evaluation's seed (config key `seed`; default: the config's, 100, so the demo's numbers are "
                        "those of `ivln-ce eval` with the same agent)")
    d.add_argument("--benchmark-seed", type=int, default=0, help="the generator seed of the tiny benchmark, when it is built")
    d.add_argument("--workers", type=int, default=1, help="environments evaluating in parallel (eval.num_envs)")
    d.set_defaults(func=cmd_demo)

    s = sub.add_parser("score", help="t-nDTW of an agent path log against target tour paths")
    s.add_argument("--gt", required=True, help="target tour paths (gt_ndtw.json layout)")
    s.add_argument("--agent", required=True, help="agent path log (dtw_data_ckpt_*.json layout)")
    s.add_argument("--split", required=True, help="split inside the target file, e.g. val_unseen")
    s.add_argument("--mode", choices=["official", "paper"], default=None, help="t-nDTW variant (default official)")
    s.add_argument("--d-th", type=float, default=None, help="normalising threshold d_th in metres (default 3.0)")
    s.add_argument("--on-infeasible", choices=["error", "nan", "paper_fallback"], default=None)
    s.add_argument("--json", action="store_true", help="print a JSON report instead of text")
    s.add_argument("--per-tour", action="store_true", help="list every tour's score")
    s.add_argument("--config", default=None, help="YAML config (metrics.tndtw.* is used)")
    s.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. metrics.tndtw.d_th=3.0")
    s.set_defaults(func=cmd_score)

    ev = sub.add_parser("eval", help="evaluate an agent on every tour of a split (resumable, parallel)")
    ev.add_argument("--config", required=True, action="append",
                    help="YAML config, e.g. configs/2_eval_iterative/reference_agents.yaml; repeat to layer files "
                         "(e.g. a recipe, then configs/profiles/official.yaml)")
    ev.add_argument("overrides", nargs="*", help="dotted overrides, e.g. eval.agent=random eval.num_envs=2")
    ev.set_defaults(func=cmd_eval)

    trn = sub.add_parser("train", help="teacher forcing / DAgger / tour-sequential training, or reinforcement fine-tuning "
                                         "(train.trainer=rl), of a policy (resumable)")
    trn.add_argument("--config", required=True, action="append",
                     help="YAML recipe, e.g. configs/embedded/map_cma_iterative_gt.yaml; repeat to layer files")
    trn.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.epochs=2 train.out_dir=results/x")
    trn.set_defaults(func=cmd_train)

    rp = sub.add_parser("reproduce", help="the paper's Tables 3/4 on the embedded benchmark: train, evaluate, tabulate (resumable); "
                                          "`reproduce coverage`: its Fig. 2b alone (oracle tour coverage, no training)")
    rp.add_argument("table", choices=["table3", "table4", "all", "coverage"],
                    help="coverage: the oracle's tour coverage (Fig. 2b) on an existing benchmark; --seeds and --device do not apply")
    rp.add_argument("--scale", choices=["tiny", "quick", "small", "default"], default="small",
                    help="budget: tiny (minutes, a smoke run), quick (the small budget, evaluated on the first 5 tours of "
                         "each split), small (hours on a CPU), default (the embedded recipes)")
    rp.add_argument("--seeds", type=int, default=3)
    rp.add_argument("--device", default="cpu", help="cpu or cuda")
    rp.add_argument("--out", required=True, help="folder for every run, the tables and the run's README")
    rp.add_argument("--data", default=None, help="benchmark folder (default data/synthetic_<preset>; built if missing, except by coverage)")
    rp.add_argument("--num-envs", type=int, default=None, help="environments per training and evaluation (default: the scale's)")
    rp.add_argument("--splits", nargs="+", default=None, metavar="SPLIT", help="coverage: the splits whose tours are walked "
                                                                                "(default train val_unseen)")
    rp.add_argument("--max-tours", type=int, default=None, help="coverage: only the first N tours of each split (default: the "
                                                                  "scale's evaluation subset, all for small and default)")
    rp.add_argument("--max-k", type=int, default=None, help="coverage: tabulate k = 1..K episodes done (default 20; only the first "
                                                              "K + 1 episodes of each tour are walked)")
    rp.set_defaults(func=cmd_reproduce)

    cm = sub.add_parser("compare", help="paired per-tour differences of two evaluations of the same tours, with "
                                         "hierarchical bootstrap intervals (houses, tours; seeds when several pairs)")
    cm.add_argument("results", nargs="+", metavar="RESULTS",
                    help="results folders of `ivln-ce eval` in pairs: A B [A2 B2 ...], one pair per training seed; "
                         "differences are A - B. A saved report stands for a run whose folder is gone: "
                         "REPORT.json#a or #b (seed pair K: #a@K), its per-tour values of that side "
                         "(--label-a/--label-b then apply to the folders only)")
    cm.add_argument("--split", default="val_unseen")
    cm.add_argument("--label-a", default=None, help="the run label in the A folders (when they hold several)")
    cm.add_argument("--label-b", default=None, help="the run label in the B folders (when they hold several)")
    cm.add_argument("--resamples", type=int, default=10000, help="bootstrap replicates (default 10000)")
    cm.add_argument("--seed", type=int, default=0, help="seed of the bootstrap's random stream")
    cm.add_argument("--level", type=float, default=0.95, help="interval coverage (default 0.95)")
    cm.add_argument("--tndtw", choices=["auto", "tndtw", "tndtw_official", "tndtw_paper"], default="auto",
                    help="per-tour t-nDTW field: auto = the configured variant where both runs have it for every tour, "
                         "else the paper variant (partial runs have no official t-nDTW)")
    cm.add_argument("--expect", choices=["greater", "less"], default=None,
                    help="the claimed direction of A - B: adds a verdict per metric (reproduced / not reproduced / inconclusive; "
                         "below 12 houses the t-interval on house means decides)")
    cm.add_argument("--paper", type=float, default=None,
                    help="the paper's difference A - B in t-nDTW x 100: the verdict says 'not reproduced' when the interval "
                         "excludes half of it (docs/results/findings_rejudged.md)")
    cm.add_argument("--null", action="store_true", help="the claim is no difference: 'null reproduced' when the interval lies "
                                                        "within +-margin")
    cm.add_argument("--margin", type=float, default=3.0, help="the margin of --null, in points x 100 (default 3, fixed before measuring)")
    cm.add_argument("--contrast", nargs="+", default=None, metavar="C_D",
                    help="C D [C2 D2 ...]: a second pair per seed; reports (A - B) - (C - D) tour by tour, e.g. "
                         "whether an ablation costs one agent more than another (--expect then claims its sign)")
    cm.add_argument("--summary", action="store_true", help="omit the per-tour rows")
    cm.add_argument("--out", default=None, help="JSON report (default compare_<split>.json, or contrast_<split>.json)")
    cm.set_defaults(func=cmd_compare)

    c = sub.add_parser("config", help="inspect configs")
    csub = c.add_subparsers(dest="config_command", required=True)
    cs = csub.add_parser("show", help="print the fully resolved config")
    cs.add_argument("--config", default=None, action="append", help="YAML config; repeat to layer files")
    cs.add_argument("overrides", nargs="*")
    cs.set_defaults(func=cmd_config_show)

    dt = sub.add_parser("data", help="dataset tools")
    dsub = dt.add_subparsers(dest="data_command", required=True)
    dv = dsub.add_parser("validate", help="validate episode (and optional tour/reference) files")
    dv.add_argument("episodes", help="R2R-VLN-CE episode file (.json or .json.gz)")
    dv.add_argument("--references", help="{split}_gt.json.gz reference trajectories")
    dv.add_argument("--tours", help="tours.json")
    dv.add_argument("--split", help="split of tours.json to join")
    dv.add_argument("--scenes-dir", help="check every scene_id against the .glb files under this folder")
    dv.set_defaults(func=cmd_data_validate)

    sc = sub.add_parser("scene", help="generate and look at embedded scenes")
    ssub = sc.add_subparsers(dest="scene_command", required=True)
    sg = ssub.add_parser("generate", help="write procedural houses (.glb + .semantic.json)")
    sg.add_argument("--seed", type=int, required=True)
    sg.add_argument("--count", type=int, default=1, help="houses with seeds seed, seed+1, ...")
    sg.add_argument("--out", required=True, help="output folder (one sub-folder per house)")
    sg.set_defaults(func=cmd_scene_generate)
    sv = ssub.add_parser("view", help="RGB / depth / semantic panels from a pose")
    sv.add_argument("scene", help="path to a generated .glb")
    sv.add_argument("--out", required=True, help="PNG to write")
    sv.add_argument("--x", type=float, default=None)
    sv.add_argument("--z", type=float, default=None)
    sv.add_argument("--heading", type=float, default=0.0, help="degrees; 0 faces -z, positive turns left")
    sv.add_argument("--seed", type=int, default=0, help="random navigable pose when --x/--z are not given")
    sv.add_argument("--renderer", choices=["moderngl", "embree", "auto"], default="auto")
    sv.add_argument("overrides", nargs="*", help="simulator config overrides, e.g. simulator.rgb.width=512")
    sv.set_defaults(func=cmd_scene_view)
    st = ssub.add_parser("topdown", help="plan view: rooms, labelled objects, navigable grid")
    st.add_argument("scene", help="path to a generated .glb")
    st.add_argument("--out", required=True, help="PNG to write")
    st.add_argument("--scale", type=float, default=40.0, help="pixels per metre")
    st.set_defaults(func=cmd_scene_topdown)

    km = sub.add_parser("known-maps", help="build known maps ({out}/{source}/{scan}.npz) for generated scenes (resumable)")
    km.add_argument("scenes", help="a generated .glb, or a folder searched for them")
    km.add_argument("--out", required=True, help="known-maps root (mapping.known_maps_dir)")
    km.add_argument("--method", choices=["mesh", "visit"], default="mesh",
                    help="mesh: GT semantics straight from the labelled mesh; visit: a full turn at every navigable lattice point")
    km.add_argument("--rednet", default=None, help="RedNet checkpoint: predicted semantics (needs --method visit)")
    km.add_argument("--rednet-depth", type=int, choices=[18, 34, 50], default=50, help="RedNet encoder depth of the checkpoint")
    km.add_argument("--source", default=None, help="sub-folder (default gt_semantics, or predicted_semantics with --rednet)")
    km.add_argument("--spacing", type=float, default=1.0, help="visit: lattice spacing of viewpoints (m)")
    km.add_argument("--turns", type=int, default=24, help="visit: views per full turn")
    km.add_argument("--overwrite", action="store_true", help="rebuild maps that already exist")
    km.add_argument("overrides", nargs="*", help="simulator config overrides, e.g. simulator.depth.width=128")
    km.set_defaults(func=cmd_known_maps)

    dsy = dsub.add_parser("synth", help="build the synthetic IR2R-CE benchmark (resumable)")
    dsy.add_argument("--preset", choices=["tiny", "small", "default"], default="tiny")
    dsy.add_argument("--out", required=True, help="output folder (scenes, episodes, tours, targets)")
    dsy.add_argument("--seed", type=int, default=0)
    dsy.add_argument("--workers", type=int, default=1, help="processes building houses in parallel")
    dsy.set_defaults(func=cmd_data_synth)
    dto = dsub.add_parser("tours", help="generate tours.json for an episode file")
    dto.add_argument("--episodes", required=True)
    dto.add_argument("--distance", choices=["geodesic", "euclidean"],
                     help="chain each scene's paths into tours by this distance (or give --one-per-episode)")
    dto.add_argument("--one-per-episode", action="store_true",
                     help="every episode its own tour: the tours file of an episodic evaluation (R2R / R4R style); "
                          "no distances, no scenes")
    dto.add_argument("--scenes-dir", help="scenes for geodesic distances (embedded .glb or MP3D with habitat)")
    dto.add_argument("--max-dy", type=float, default=0.5, help="euclidean: max height difference of one floor (m)")
    dto.add_argument("--split", help="split name in the output (default: from the file name)")
    dto.add_argument("--seed", type=int, default=0)
    dto.add_argument("--solver", choices=["ortools", "heuristic"], default="ortools")
    dto.add_argument("--out", required=True, help="tours.json to write")
    dto.set_defaults(func=cmd_data_tours)
    dr4 = dsub.add_parser("r4r", help="R4R: join paths whose end lies near another's start (Jain et al. 2019, §2.2)",
                          description="Join, within each scene, every ordered pair of distinct paths (A, B) whose end of A lies "
                                      "within --threshold of the start of B: reference path A + shortest path + B, one "
                                      "instruction per pair of A's and B's instructions, A's start pose, B's goal. Writes the "
                                      "episodes (official layout), {stem}_gt.json.gz expert walks when --scenes is given, and "
                                      "{stem}_stats.md/.json (R4R's Table 1).")
    dr4.add_argument("--episodes", required=True, help="R2R-VLN-CE episode file (.json or .json.gz)")
    dr4.add_argument("--distance", choices=["geodesic", "euclidean"], required=True,
                     help="join test: simulator geodesic (needs --scenes) or the same-floor Euclidean proxy")
    dr4.add_argument("--threshold", type=float, default=3.0, help="join when d(end of A, start of B) < this (m; default 3.0)")
    dr4.add_argument("--scenes", "--scenes-dir", dest="scenes_dir", default=None,
                     help="scenes folder (scene_id is relative to it): shortest connecting paths, geodesic start-goal "
                          "distances and expert walks; without it straight connectors and no reference trajectories")
    dr4.add_argument("--max-per-scene", type=int, default=None,
                     help="keep at most N joined paths per scene, a uniform sample seeded by --seed and the scene "
                          "(the pair count grows with the square of a scene's paths; default: all)")
    dr4.add_argument("--instructions-per-path", type=int, default=None, metavar="K",
                     help="use only the first K instructions (file order) of each input path: at most K x K "
                          "episodes per joined path instead of N_A x N_B (default: all)")
    dr4.add_argument("--seed", type=int, default=0)
    dr4.add_argument("--max-dy", type=float, default=0.5, help="euclidean: max height difference of one floor (m)")
    dr4.add_argument("--padded-length", type=int, default=None,
                     help="token list length (default: the input's, raised to fit the longest joined instruction)")
    dr4.add_argument("--out", required=True, help="episode file to write, e.g. .../r4r_val_unseen/r4r_val_unseen.json.gz")
    dr4.add_argument("overrides", nargs="*", help="simulator.* overrides, e.g. simulator.backend=habitat")
    dr4.set_defaults(func=cmd_data_r4r)
    dpe = dsub.add_parser("perturb", help="instruction and trajectory perturbations of an episode file (hard negatives, after Zhao et al. 2021)",
                          description="Write perturbed copies of an episode file's episodes, each with a 'perturbation' "
                                      "record (kind, source episode, what changed): instruction kinds change the text and "
                                      "keep the path; trajectory kinds keep the text and change the path (they need "
                                      "--scenes-dir). Also writes {stem}_gt.json.gz when every episode can have a "
                                      "reference, and {stem}_stats.json (per-kind counts).")
    dpe.add_argument("--episodes", required=True, help="R2R-VLN-CE episode file (.json or .json.gz)")
    dpe.add_argument("--out", required=True, help="episode file to write (.json.gz or .json)")
    dpe.add_argument("--kinds", default=None,
                     help="comma-separated kinds: direction_swap, landmark_swap, room_swap, sentence_shuffle, sentence_drop, "
                          "truncate, detour, partial_reversal, other_path (default: all; without --scenes-dir the "
                          "instruction kinds)")
    dpe.add_argument("--seed", type=int, default=0)
    dpe.add_argument("--scenes-dir", "--scenes", dest="scenes_dir", default=None,
                     help="scenes folder (scene_id is relative to it): scene categories and rooms for the swaps, the "
                          "simulator for trajectory kinds and expert walks")
    dpe.add_argument("--other-path-threshold", type=float, default=3.0,
                     help="other_path: without a path of the same start, use the nearest start closer than this (m)")
    dpe.add_argument("--detour-offset", type=float, nargs=2, metavar=("MIN", "MAX"), default=None,
                     help="detour: distance of the waypoint from the replaced segment (m; default 1.0 2.0)")
    dpe.add_argument("--padded-length", type=int, default=None,
                     help="token list length (default: the input's, raised to fit the longest perturbed instruction)")
    dpe.add_argument("overrides", nargs="*", help="simulator.* overrides, e.g. simulator.backend=habitat")
    dpe.set_defaults(func=cmd_data_perturb)
    dst = dsub.add_parser("stats", help="Table-1 statistics of a split's tours and episodes")
    dst.add_argument("--episodes", required=True)
    dst.add_argument("--tours", required=True)
    dst.add_argument("--split", help="split of tours.json (default: from the episode file name)")
    dst.add_argument("--json", action="store_true")
    dst.set_defaults(func=cmd_data_stats)

    pr = sub.add_parser("probe", help="behavioural probes: skill-specific intervention episodes (after Yang et al. 2023, Behavioral Analysis of VLN Agents)")
    psub = pr.add_subparsers(dest="probe_command", required=True)
    pb = psub.add_parser("build", help="stop, direction, object and room intervention episodes from aligned episodes (resumable)",
                         description="Cut every aligned episode of a split at its aligned points and write stop, "
                                     "direction, object- and room-seeking intervention episodes (official episode layout) "
                                     "with their metadata. Object and room probes need the scene's semantic annotations "
                                     "(the embedded houses have them). "
                                     "Needs episodes with instruction_alignment (the synthetic benchmark has it; the "
                                     "released R2R-VLN-CE files do not).")
    pb.add_argument("--data", required=True, help="data root (datasets/R2R_VLNCE_v1-3_preprocessed/{split}/, scene_datasets/)")
    pb.add_argument("--split", default="val_unseen")
    pb.add_argument("--out", required=True, help="output folder (one per split; a rerun resumes)")
    pb.add_argument("--skills", default="stop,direction,object,room",
                    help="comma-separated: stop, direction, object, room (default all four)")
    pb.add_argument("--free-distance", type=float, default=1.0,
                    help="metres of straight free walk that make a direction sector free (default 1.0)")
    pb.add_argument("overrides", nargs="*", help="simulator.* / data.* overrides, e.g. simulator.backend=habitat")
    pb.set_defaults(func=cmd_probe_build)
    prun = psub.add_parser("run", help="an agent's action distributions at the end of every probe's path, and statistics",
                           description="Teacher-force an agent (eval.agent=policy with policy.*, or a reference agent: "
                                       "probe_oracle, forward_biased, uniform) along every probe's truncated path and "
                                       "record its action distribution at p_j in each condition; then Scores, "
                                       "intervention effects with hierarchical-bootstrap intervals and mixed models. "
                                       "Resumable: a rerun reuses every probe made from the same inputs.")
    prun.add_argument("--probes", required=True, help="the --out folder of `ivln-ce probe build`")
    prun.add_argument("--out", required=True, help="output folder (one per agent; a rerun resumes)")
    prun.add_argument("--data", default=None, help="data root holding scene_datasets/ (default: the config's data.root)")
    prun.add_argument("--config", action="append", help="YAML config (repeatable, applied in order), e.g. a recipe")
    prun.add_argument("--skills", default="",
                      help="comma-separated: stop, direction, object, room (default: every skill of the build)")
    prun.add_argument("--limit", type=int, default=0, help="only N probe ids of each skill, spread evenly over the sorted ids and so over the houses (quick looks; 0 = all)")
    prun.add_argument("--waypoint-radius", type=float, default=0.25,
                      help="metres within which the teacher counts a point of the path as reached (default 0.25)")
    prun.add_argument("--rollout-steps", type=int, default=15,
                      help="after the reading at p_j the agent acts on its own for up to N actions or until it stops, and "
                           "the outcome is measured (heading change, stop rate, angle to the object, delta d to the room); "
                           "0 = no rollout, the one-step reading only (default 15)")
    prun.add_argument("--rollout-policy", choices=("argmax", "sample"), default="argmax",
                      help="how the rollout picks the agent's action from its distribution: the most probable (ties go "
                           "to STOP) or sampled (default argmax)")
    prun.add_argument("--rollout-seed", type=int, default=0,
                      help="seed of --rollout-policy sample (per probe; every condition of a probe draws the same numbers)")
    prun.add_argument("overrides", nargs="*", help="config overrides, e.g. eval.agent=forward_biased, policy.checkpoint=...")
    prun.set_defaults(func=cmd_probe_run)
    ptab = psub.add_parser("tables", help="Score, effect and mixed-model tables of several `probe run` folders (one per agent)")
    ptab.add_argument("--runs", nargs="+", required=True, help="output folders of `ivln-ce probe run`")
    ptab.add_argument("--out", required=True, help="folder for probe_tables.md, .csv and .tex")
    ptab.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    ptab.set_defaults(func=cmd_probe_tables)
    pfig = psub.add_parser("figures", help="the seed's probe figures (stop vs length, direction polar plots, object error, "
                                           "room) from `probe run` folders: PNG, SVG and a CSV of each figure's numbers")
    pfig.add_argument("--runs", nargs="+", required=True, help="output folders of `ivln-ce probe run` (one agent each)")
    pfig.add_argument("--out", required=True, help="folder for the figures")
    pfig.add_argument("--probes", default=None, help="the `probe build` folder the runs were made from: the object "
                                                   "figure and the room figure's hop counts need its probe.json files")
    pfig.add_argument("--length-bin", type=int, default=1, help="steps of tau per trajectory-length bin (default 1)")
    pfig.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples of the stop bands (default 2000)")
    pfig.set_defaults(func=cmd_probe_figures)

    tr = sub.add_parser("train-rednet", help="train RedNet on frames rendered from synthetic houses (resumable)")
    tr.add_argument("--out", required=True, help="folder for cached frames, checkpoint.pt and report.json")
    tr.add_argument("--preset", choices=["tiny", "small", "default"], default="small", help="whose houses to render")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--size", type=int, default=128)
    tr.add_argument("--frames-per-house", type=int, default=60)
    tr.add_argument("--encoder-depth", type=int, choices=[18, 34, 50], default=18)
    tr.add_argument("--epochs", type=int, default=4)
    tr.add_argument("--batch-size", type=int, default=8)
    tr.add_argument("--lr", type=float, default=2e-4)
    tr.add_argument("--max-train-houses", type=int, default=None)
    tr.add_argument("--max-eval-houses", type=int, default=None)
    tr.add_argument("--no-resume", action="store_true")
    tr.set_defaults(func=cmd_train_rednet)

    tc = sub.add_parser("train-compat", help="train the instruction-trajectory compatibility model (Zhao et al. 2021, On the Evaluation of VLN Instructions, §4; resumable)")
    tc.add_argument("--episodes", required=True, help="clean training episodes (compatible pairs; a path's other instructions are paraphrase positives)")
    tc.add_argument("--scenes-dir", required=True, help="scenes of the episodes (frames are rendered along every path)")
    tc.add_argument("--out", required=True, help="run folder: compat.pt, resume.pt, tb/, history.json, features/")
    tc.add_argument("--perturbed", default=None, help="`data perturb` output for --episodes (default: made into OUT/perturbed_train.json.gz)")
    tc.add_argument("--val-episodes", default=None, help="clean episodes for the validation AUC after every epoch")
    tc.add_argument("--val-perturbed", default=None, help="`data perturb` output for --val-episodes (default: made into OUT)")
    tc.add_argument("--epochs", type=int, default=10)
    tc.add_argument("--batch-size", type=int, default=16, help="pairs per batch, split 2:1:1 (a multiple of 4)")
    tc.add_argument("--lr", type=float, default=1e-3)
    tc.add_argument("--seed", type=int, default=0)
    tc.add_argument("--gamma", type=float, default=2.0, help="focal loss gamma (0: cross entropy)")
    tc.add_argument("--beta", type=float, default=1.0, help="weight of the classification loss")
    tc.add_argument("--mix", type=int, nargs="+", default=[2, 1, 1], help="ground truth : instruction-perturbed : trajectory-perturbed")
    tc.add_argument("--resume-every", type=int, default=0, help="also write resume.pt every N steps (0: after every epoch only)")
    tc.add_argument("--device", default="cpu")
    tc.add_argument("--spacing", type=float, default=1.5, help="metres between viewpoints along a path")
    tc.add_argument("--max-viewpoints", type=int, default=12)
    tc.add_argument("--views", type=int, default=4, help="panorama views per viewpoint (one more looks back)")
    tc.add_argument("--size", type=int, default=64, help="frame size (px)")
    tc.add_argument("--rgb-weights", default=None, help="ResNet-18 weights for the frozen RGB trunk (default: seeded random)")
    tc.set_defaults(func=cmd_train_compat)
    si = sub.add_parser("score-instructions", help="compatibility scores of instructions with their paths, ROC AUC with labels")
    si.add_argument("--checkpoint", required=True, help="compat.pt of `ivln-ce train-compat`")
    si.add_argument("--episodes", required=True, nargs="+", help="episode files (a clean file and `data perturb` outputs of it)")
    si.add_argument("--scenes-dir", required=True)
    si.add_argument("--out", required=True, help="scores JSON")
    si.add_argument("--labels", default=None, help="'perturbation' (perturbed episodes are 0, others 1) or a JSON file {labels: {episode_id: 0|1}}")
    si.add_argument("--feature-cache", default=None, help="folder of cached path features (reused when made from the same inputs)")
    si.add_argument("--batch-size", type=int, default=64)
    si.add_argument("--device", default="cpu")
    si.add_argument("--rgb-weights", default=None, help="the --rgb-weights file the checkpoint was trained with (when it was)")
    si.set_defaults(func=cmd_score_instructions)

    vz = sub.add_parser("viz", help="pictures")
    vsub = vz.add_subparsers(dest="viz_command", required=True)
    vm = vsub.add_parser("maps", help="PNGs of the maps saved by `eval mapping.save_images=true`")
    vm.add_argument("--results", required=True, help="results folder of an evaluation")
    vm.add_argument("--out", default=None, help="write the PNGs here instead of next to the records")
    vm.set_defaults(func=cmd_viz_maps)
    vr = vsub.add_parser("report", help="static HTML tour viewer of an evaluation (opens from file://)")
    vr.add_argument("--results", default=None, help="results folder of `ivln-ce eval` (may be left out with --probes and --out)")
    vr.add_argument("--out", default=None, help="report folder (default RESULTS/report)")
    vr.add_argument("--label", default=None, help="only this run label (default: every run in the folder)")
    vr.add_argument("--split", default=None, help="only this split (default: every split in the folder)")
    vr.add_argument("--data", default=None, help="data root to use instead of the one recorded in the run's config (moved data)")
    vr.add_argument("--workers", type=int, default=None, help="processes rendering tours (default: CPU count, at most 8)")
    vr.add_argument("--probes", default=None, metavar="RUN_DIR",
                    help="a `probe run` folder: adds a probe page (its figures and example probes)")
    vr.add_argument("--probe-build", default=None, metavar="BUILD_DIR",
                    help="the `probe build` folder of that run: the examples' instructions (I_int marked), the object "
                         "figure and the room figure's hop counts")
    vr.add_argument("--probe-data", default=None, metavar="DATA_ROOT",
                    help="a data root holding the probe run's scenes (scene_datasets/): renders each example's frames at "
                         "p_j (RGB, depth, semantics) with the run's simulator settings; needs --probe-build")
    vr.add_argument("--probe-examples", type=int, default=8, help="example probes per skill on the probe page (default 8)")
    vr.add_argument("--compare", default=None, metavar="OTHER_RESULTS",
                    help="a second results folder: each run's section shows its paired per-tour differences (run - other) "
                         "with the same split there, per metric with a hierarchical bootstrap interval (as `ivln-ce compare`)")
    vr.add_argument("--compare-label", default=None, help="the run label in OTHER_RESULTS (when it holds several for the split)")
    vr.set_defaults(func=cmd_viz_report)
    vt = vsub.add_parser("table", help="results table across runs: mean ± standard error over seeds")
    vt.add_argument("runs", nargs="+", metavar="RUN_DIR", help="results folders of `ivln-ce eval`")
    vt.add_argument("--format", choices=["md", "csv", "latex"], default="md")
    vt.add_argument("--split", default=None, help="only this split")
    vt.add_argument("--label", default=None, help="only this run label")
    vt.add_argument("--ignore", action="append", default=[], metavar="KEY",
                    help="config key (or subtree) that may differ within a row, e.g. policy.checkpoint (repeatable)")
    vt.add_argument("--digits", type=int, default=2)
    vt.set_defaults(func=cmd_viz_table)
    vc = vsub.add_parser("curves", help="loss, action accuracy, beta and validation t-nDTW from TensorBoard event files")
    vc.add_argument("train_dirs", nargs="+", metavar="TRAIN_DIR", help="training folders (event files anywhere below)")
    vc.add_argument("--out", default=None, help="figure file, .png or .svg (default TRAIN_DIR/curves.png)")
    vc.set_defaults(func=cmd_viz_curves)
    vp = vsub.add_parser("positions", help="an episode metric by position in the tour (1-5, 6-10, ...), optionally paired "
                                           "against a second evaluation of the same tours, with hierarchical bootstrap intervals")
    vp.add_argument("results", nargs="+", metavar="RESULTS",
                    help="a results folder of `ivln-ce eval`, or pairs A B [A2 B2 ...] (A - B, one pair per training seed)")
    vp.add_argument("--split", default="val_unseen")
    vp.add_argument("--alone", action="store_true",
                    help="every folder is one run's evaluation for one training seed: pool them, unpaired")
    vp.add_argument("--label-a", default=None, help="the run label in the A folders (when they hold several)")
    vp.add_argument("--label-b", default=None, help="the run label in the B folders (when they hold several)")
    vp.add_argument("--metric", default="nDTW", choices=["SR", "SPL", "nDTW", "SDTW", "CLS"])
    vp.add_argument("--width", type=int, default=5, help="positions per group (default 5)")
    vp.add_argument("--resamples", type=int, default=10_000)
    vp.add_argument("--seed", type=int, default=0, help="seed of the bootstrap's random stream")
    vp.add_argument("--level", type=float, default=0.95)
    vp.add_argument("--out", default=None, help="JSON report")
    vp.set_defaults(func=cmd_viz_positions)

    b = sub.add_parser("bench", help="run a benchmark script from scripts/ (e.g. tndtw)")
    b.add_argument("name")
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    b.set_defaults(func=cmd_bench)
    return p


_OVERRIDE = re.compile(r"^[A-Za-z_][\w.]*=")


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parse_args``, except that ``key=value`` overrides may also follow options
    (``scene view SCENE --out x.png simulator.rgb.width=512``): argparse gives a positional
    ``nargs="*"`` list only the words before the first option, and subparsers rule out
    ``parse_intermixed_args``. Anything else left over is still an error."""
    args, rest = parser.parse_known_args(argv)
    if rest:
        late = [w for w in rest if _OVERRIDE.match(w)]
        if len(late) < len(rest) or not isinstance(getattr(args, "overrides", None), list):
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        args.overrides = [*args.overrides, *late]
    return args


#: commands whose rerun continues where an interrupted run stopped (finished work is kept)
RESUMABLE = {("eval",), ("train",), ("reproduce",), ("probe", "build"), ("probe", "run"), ("known-maps",), ("data", "synth"),
             ("train-rednet",), ("train-compat",), ("demo",)}


def _command_words(args: argparse.Namespace) -> tuple[str, ...]:
    sub = next((getattr(args, k) for k in ("probe_command", "data_command", "scene_command", "viz_command", "config_command")
                if getattr(args, k, None)), None)
    return (args.command, sub) if sub else (args.command,)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        # Ctrl-C: one line instead of a traceback; environment workers ignore SIGINT and are
        # closed by the engines' own clean-up on the way out
        words = _command_words(args)
        again = "; the same command resumes" if words in RESUMABLE or words[:1] in RESUMABLE else ""
        print(f"\nivln-ce {' '.join(words)}: interrupted{again}", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        print(f"ivln-ce {args.command}: error: this command needs PyTorch, which is not installed in this environment: "
              f"pip install 'torch>=2.2' (a dependency of ivln-ce; a CPU-only machine can take the smaller CPU build: "
              f"pip install torch --index-url https://download.pytorch.org/whl/cpu)", file=sys.stderr)
        return 2
    except (ConfigError, DataFormatError, UsageError, ValueError, OSError) as exc:
        # OSError: unreadable, missing or directory paths. The message may quote odd text from
        # the input (lone surrogates), so it is escaped rather than allowed to fail in print.
        enc = getattr(sys.stderr, "encoding", None) or "utf-8"
        text = f"ivln-ce {args.command}: error: {exc}"
        print(text.encode(enc, "backslashreplace").decode(enc, "replace"), file=sys.stderr)
        return 2
    finally:
        leave_process_group()


def leave_process_group() -> None:
    """A torchrun rank (``train``, ``eval``, ``rl``) leaves its torch.distributed group before the
    interpreter exits: one that exits inside it can die of SIGABRT after its work is done (gloo's
    threads meet the exit), and torchrun reports the run as failed. Imports nothing: a command
    that never loaded torch.distributed has no group."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
