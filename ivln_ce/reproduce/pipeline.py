"""``ivln-ce reproduce``: the paper's Tables 3 and 4 on the embedded benchmark, by one resumable command.

Steps, each reused when its inputs are unchanged (fingerprints) and resumed when interrupted:

1. the synthetic benchmark of the scale's preset (``data synth``; fingerprinted per house);
2. for RedNet semantics: RedNet trained on the benchmark's train houses (``train-rednet``;
   resumes from its checkpoint);
3. for known maps: GT maps from the labelled meshes, predicted maps by the exhaustive visit
   with that RedNet (``known-maps``; one file per scene, skipped when present);
4. every model of the table, for every seed, with the same budget (``ivln-ce train``; exact
   resume from ``resume.pt``; a run folder made with other inputs is moved aside and redone);
5. every trained model on val_seen and val_unseen tours, in every evaluation map mode of its
   table (``ivln-ce eval``; per-tour resume with fingerprints);
6. the tables (``tables.py``) and the tour-coverage analytics (``coverage.py``), rebuilt from
   the results files every time, and ``README.md`` with the machine, the scale, the time and
   the deviations from the paper's recipes.

Everything lands under ``OUT``: ``data`` only when ``--data`` points there, ``rednet/``,
``known_maps/``, ``runs/{model}/seed{s}/{train,eval/{split}_{mode}}/``, ``table3.*``,
``table4.*``, ``coverage.*``, ``README.md``, ``reproduce.log`` and ``fingerprints.json``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import ivln_ce
from ivln_ce.data.jsonio import atomic_write_text
from ivln_ce.fingerprint import code_digest
from ivln_ce.reproduce.plan import (DEVIATIONS, EVAL_SPLITS, GATE_FOLDER_SUFFIX, GATE_LABEL, GATE_SPLIT, REFERENCE_AGENTS, SCALES, Run, Scale,
                                   common_overrides, own_mode, runs_for)


class Log:
    """Messages to the console and appended to ``reproduce.log``."""

    def __init__(self, path: Path, echo: bool = True):
        self.path, self.echo = path, echo
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, msg: str) -> None:
        line = f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}"
        with open(self.path, "a") as fh:
            fh.write(line + "\n")
        if self.echo:
            print(line, file=sys.stderr, flush=True)


def _data_dir(scale: Scale, data: str | Path | None) -> Path:
    return Path(data) if data else Path("data") / f"synthetic_{scale.preset}"


def run_dir(out: Path, run: Run, seed: int) -> Path:
    return out / "runs" / run.key / f"seed{seed}"


def base_overrides(out: Path, data: Path, scale: Scale, run: Run, seed: int, device: str) -> list[str]:
    return [f"data.root={data}", f"seed={seed}", f"results_dir={run_dir(out, run, seed)}",
            f"mapping.known_maps_dir={out / 'known_maps'}", f"mapping.rednet_checkpoint={out / 'rednet' / 'checkpoint.pt'}",
            "mapping.rednet_depth=18", f"train.device={device}", f"eval.device={device}",
            *common_overrides(scale), *run.overrides]


def train_overrides(out: Path, scale: Scale, run: Run, seed: int) -> list[str]:
    """Every seed of a recipe shares its frozen encoders (as the paper's pretrained ones are
    shared), so the seeds' teacher-forcing data is the same and is collected once
    (``train.store_cache``, checked on every reuse); the seeds differ in the trained weights
    and the batch order."""
    return [f"train.out_dir={run_dir(out, run, seed) / 'train'}", "train.split=train", f"train.epochs={scale.epochs}",
            f"train.update_size={scale.update_size}", f"train.batch_size={scale.batch_size}", f"train.num_envs={scale.num_envs}",
            f"train.max_steps={scale.max_steps}", "train.iterations=1", "train.p=1.0", f"train.store_cache={out / 'store_cache'}",
            "policy.frozen_encoder_seed=0"]


@dataclass(frozen=True)
class TrainStage:
    """One training of a model: its folder and overrides. ``warm_from`` names the stage whose
    final checkpoint this one starts from (``policy.checkpoint``), known once that stage ran."""

    name: str
    folder: Path
    overrides: tuple[str, ...]
    warm_from: str | None = None


def train_stages(out: Path, scale: Scale, run: Run, seed: int) -> list[TrainStage]:
    """The trainings of a model at a scale: teacher forcing, then (MAP-CMA, ``ft_rounds`` > 0)
    DAgger fine-tuning warm-started from it (SPEC §9.7). The last stage writes ``train/``."""
    tf = list(train_overrides(out, scale, run, seed))
    if run.table != "table4":
        return [TrainStage("teacher forcing", run_dir(out, run, seed) / "train", tuple(tf))]
    tf = [o if not o.startswith("train.split=") else f"train.split={scale.map_tf_split}" for o in tf]
    if scale.ft_rounds <= 0:
        return [TrainStage("teacher forcing", run_dir(out, run, seed) / "train", tuple(tf))]
    tf = [o if not o.startswith("train.out_dir=") else f"train.out_dir={run_dir(out, run, seed) / 'train_tf'}" for o in tf]
    ft = [f"train.out_dir={run_dir(out, run, seed) / 'train'}", "train.split=train", f"train.epochs={scale.ft_epochs}",
          f"train.update_size={scale.ft_update_size}", f"train.batch_size={scale.batch_size}", f"train.num_envs={scale.num_envs}",
          f"train.max_steps={scale.max_steps}", f"train.iterations={scale.ft_rounds}", f"train.p={scale.ft_p}",
          "policy.frozen_encoder_seed=0", "train.itmaps_ft_on_tours=true"]
    return [TrainStage("teacher forcing", run_dir(out, run, seed) / "train_tf", tuple(tf)),
            TrainStage("DAgger fine-tuning", run_dir(out, run, seed) / "train", tuple(ft), warm_from="teacher forcing")]


def eval_overrides(out: Path, scale: Scale, run: Run, seed: int, split: str, mode: str, checkpoint: Path, tours: list[str]) -> list[str]:
    folder = run_dir(out, run, seed) / "eval" / f"{split}_{mode}"
    over = [f"results_dir={folder}", "eval.agent=policy", f"eval.split={split}", f"policy.checkpoint={checkpoint}",
            f"eval.num_envs={scale.num_envs}", "env.oracle_phases=true", "eval.label=final"]
    if mode != "-":
        over.append(f"mapping.mode={mode}")
    if tours:
        over.append(f"eval.tours=[{','.join(tours)}]")
    return over


def gate_eval_overrides(out: Path, scale: Scale, run: Run, seed: int, checkpoint: Path, tours: list[str]) -> list[str]:
    """The gate's evaluation: val_unseen in the model's own map mode with ``eval.instruction=none``,
    into ``eval/val_unseen_{mode}_noinstruction`` (label ``final-instruction_none``)."""
    mode = own_mode(run)
    over = eval_overrides(out, scale, run, seed, GATE_SPLIT, mode, checkpoint, tours)
    folder = run_dir(out, run, seed) / "eval" / f"{GATE_SPLIT}_{mode}{GATE_FOLDER_SUFFIX}"
    over = [f"results_dir={folder}" if o.startswith("results_dir=") else f"eval.label={GATE_LABEL}" if o.startswith("eval.label=") else o
            for o in over]
    return over + ["eval.instruction=none"]


def _train_one(cfg, folder: Path, log: Log, progress: bool) -> dict:
    from ivln_ce.training.trainer import TrainError, train

    try:
        return train(cfg, show_progress=progress)
    except TrainError as exc:
        if "other inputs" not in str(exc):
            raise
        stale = folder.with_name(folder.name + f".stale-{int(time.time())}")
        log(f"{folder}: made with other inputs; moved to {stale.name} and trained again")
        shutil.move(str(folder), str(stale))
        return train(cfg, show_progress=progress)


def _ensure_rednet(out: Path, scale: Scale, seed: int, log: Log) -> None:
    from ivln_ce.fingerprint import digest
    from ivln_ce.training.rednet import RedNetTrainConfig, train_rednet

    folder = out / "rednet"
    cfg = RedNetTrainConfig(out=str(folder), preset=scale.preset, seed=seed, size=scale.rednet_size,
                            frames_per_house=scale.rednet_frames, encoder_depth=18, epochs=scale.rednet_epochs)
    key = digest({"config": {k: v for k, v in asdict(cfg).items() if k != "out"}, "code": code_digest("training", "models", "scenes", "sim")})
    stamp = folder / "inputs.json"
    if folder.exists() and (not stamp.exists() or json.loads(stamp.read_text()).get("key") != key):
        stale = folder.with_name(f"rednet.stale-{int(time.time())}")
        shutil.move(str(folder), str(stale))
        log(f"rednet: made with other inputs; moved to {stale.name} and trained again")
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp, json.dumps({"key": key, "config": asdict(cfg)}, indent=2))
    report = folder / "report.json"
    if report.exists() and len(json.loads(report.read_text()).get("history", [])) >= cfg.epochs:
        return  # trained to the end by an earlier run with these inputs
    log(f"rednet: training RedNet-18 at {cfg.size} px on the {scale.preset} train houses ({cfg.epochs} epochs)")
    report = train_rednet(cfg, log=lambda m: log(f"rednet: {m}"))
    log(f"rednet: held-out mIoU {100 * report['miou']:.1f}")


def _ensure_known_maps(out: Path, data: Path, scale: Scale, need_predicted: bool, log: Log) -> None:
    import math

    from ivln_ce.config import load_config
    from ivln_ce.mapping.known import KnownMaps, build_known_map, known_map_of_scene
    from ivln_ce.sim.embedded import EmbeddedSimulator

    scenes = sorted((data / "scene_datasets").rglob("*.glb"))
    gt = KnownMaps(out / "known_maps", "gt_semantics")
    pred = KnownMaps(out / "known_maps", "predicted_semantics")
    segmenter = None
    for glb in scenes:
        scan = glb.stem
        todo_gt = not gt.path(scan).exists()
        todo_pred = need_predicted and not pred.path(scan).exists()
        if not (todo_gt or todo_pred):
            continue
        sensors = "[rgb,depth,semantic]" if todo_pred else "[depth,semantic]"
        sim = EmbeddedSimulator(load_config(None, [f"simulator.sensors={sensors}", "simulator.renderer=auto",
                                                   *[f"simulator.{x}.{d}={scale.size}" for x in ("rgb", "depth", "semantic") for d in ("width", "height")]]).simulator)
        sim.load_scene(str(glb))
        if todo_gt:
            xyz, sem = known_map_of_scene(sim.scene, sim.nav.floor_y, sim.config.sensor_height)
            gt.save(scan, xyz, sem)
        if todo_pred:
            if segmenter is None:
                from ivln_ce.config import load_config as lc
                from ivln_ce.models.factory import load_segmenter

                segmenter = load_segmenter(lc(None, ["mapping.semantics=rednet", f"mapping.rednet_checkpoint={out / 'rednet' / 'checkpoint.pt'}",
                                                      "mapping.rednet_depth=18"]).mapping)
            build_known_map(sim, scan, pred, spacing=scale.visit_spacing, turns=scale.visit_turns,
                            hfov=math.radians(sim.config.depth.hfov), segmenter=segmenter)
        sim.close()
    log(f"known maps: {len(scenes)} scenes (GT{' and predicted' if need_predicted else ''}) in {out / 'known_maps'}")


def _final_checkpoint(summary: dict, folder: Path) -> Path:
    names = summary.get("checkpoints") or []
    if not names:
        found = sorted(folder.glob("ckpt.*.pth"), key=lambda p: int(p.name.split(".")[1]))
        if not found:
            raise RuntimeError(f"{folder}: the training wrote no checkpoint")
        return found[-1]
    return folder / names[-1]


def _eval_tours(cfg_overrides: list[str], split: str, limit: int) -> list[str]:
    if not limit:
        return []
    from ivln_ce.config import load_config
    from ivln_ce.data.tours import load_tours

    cfg = load_config(None, cfg_overrides)
    tours = load_tours(cfg.data.tours, split)
    return [t.tour_id for t in tours][:limit]


def machine_description() -> dict[str, Any]:
    import torch

    info = {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def check_run_options(device: str, num_envs: int | None) -> None:
    """``--device`` and ``--num-envs`` by the config's own rules, before anything is built."""
    from ivln_ce.config import VALUE_RULES

    for key, value in (("train.device", device), ("train.num_envs", num_envs)):
        check, expected = VALUE_RULES[key]
        if value is not None and not check(value):
            flag = "--device" if key.endswith("device") else "--num-envs"
            raise ValueError(f"{flag} must be {expected}, got {value!r}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: torch sees no CUDA device; use --device cpu")


def _scale(scale_name: str, device: str, num_envs: int | None) -> Scale:
    """The named scale, checked, with ``num_envs`` in place of its own when given."""
    if scale_name not in SCALES:
        raise ValueError(f"unknown scale {scale_name!r}; choose one of {sorted(SCALES)}")
    check_run_options(device, num_envs)
    scale = SCALES[scale_name]
    if num_envs is not None:
        from dataclasses import replace

        scale = replace(scale, num_envs=int(num_envs))
    return scale


def reproduce_coverage(scale_name: str, out: str | Path, data: str | Path | None = None, splits: Sequence[str] = ("train", "val_unseen"),
                       max_tours: int = 0, max_k: int = 20, num_envs: int | None = None, echo: bool = True) -> dict[str, Any]:
    """``ivln-ce reproduce coverage``: Fig. 2b alone, without training anything. The benchmark
    must exist already: it is only read (it may be a shared, read-only copy)."""
    from ivln_ce.reproduce.coverage import coverage_report

    if max_k < 1:
        raise ValueError(f"--max-k must be at least 1, got {max_k}")
    if max_tours < 0:
        raise ValueError(f"--max-tours must be 0 (all) or more, got {max_tours}")
    scale = _scale(scale_name, "cpu", num_envs)
    data = _data_dir(scale, data)
    if not (data / "manifest.json").exists():
        raise ValueError(f"{data}: no synthetic benchmark there (no manifest.json); build one first with "
                         f"`ivln-ce data synth --preset {scale.preset} --out {data}`")
    out = Path(out)
    log = Log(out / "coverage.log", echo)
    t0 = time.perf_counter()
    log(f"coverage of {data} ({', '.join(splits)}) at scale {scale_name}: {scale.size} px depth, up to k = {max_k} -> {out}")
    cov = coverage_report(out, data, scale, log, max_tours=max_tours, splits=splits, max_k=max_k)
    cov["seconds"] = time.perf_counter() - t0
    log(f"coverage: done in {cov['seconds'] / 60:.1f} min: {', '.join(cov['files'])}")
    return cov


def reproduce(table: str, scale_name: str, out: str | Path, seeds: int = 3, device: str = "cpu", data: str | Path | None = None,
              echo: bool = True, num_envs: int | None = None) -> dict[str, Any]:
    """Run (or resume) the reproduction; returns where the tables are and what ran. ``num_envs``
    overrides the scale's environment count (it changes no result: fingerprints ignore it)."""
    from ivln_ce.benchmark.synthetic import build_synthetic
    from ivln_ce.config import load_config
    from ivln_ce.evaluation.evaluator import evaluate
    from ivln_ce.reproduce.coverage import coverage_report
    from ivln_ce.reproduce.tables import write_tables

    if seeds < 1:
        raise ValueError("--seeds must be at least 1")
    scale = _scale(scale_name, device, num_envs)
    out = Path(out)
    data = _data_dir(scale, data)
    log = Log(out / "reproduce.log", echo)
    progress = echo and sys.stderr.isatty()  # the bars of each training and evaluation, on a terminal
    t0 = time.perf_counter()
    runs = runs_for(table)
    log(f"reproduce {table} at scale {scale_name} ({len(runs)} models x {seeds} seeds) -> {out}")
    manifest = build_synthetic(scale.preset, data, seed=0, progress=False)
    log(f"benchmark: {data} (preset {scale.preset}; episodes {manifest['episodes']})")
    if any(r.semantics == "rednet" for r in runs):
        _ensure_rednet(out, scale, 0, log)
    if any(r.table == "table4" for r in runs):
        _ensure_known_maps(out, data, scale, any(r.semantics == "rednet" for r in runs), log)
    results: dict[str, Any] = {"runs": {}, "fingerprints": {}}
    for run in runs:
        for seed in range(seeds):
            base = base_overrides(out, data, scale, run, seed, device)
            finals: dict[str, Path] = {}
            for stage in train_stages(out, scale, run, seed):
                warm = [f"policy.checkpoint={finals[stage.warm_from]}"] if stage.warm_from else []
                cfg = load_config(None, base + list(stage.overrides) + warm)
                t = time.perf_counter()
                summary = _train_one(cfg, stage.folder, log, progress)
                finals[stage.name] = _final_checkpoint(summary, stage.folder)
                ckpt = finals[stage.name]  # the evaluations below take the last stage's
                log(f"{run.key} seed {seed}: {stage.name} done ({summary['optimizer_steps']} steps, {summary['episodes_collected']} "
                    f"episodes; {time.perf_counter() - t:.0f} s this run) -> {stage.folder.name}/{ckpt.name}")
                results["fingerprints"][f"{run.key}/seed{seed}/{stage.folder.name}"] = summary["fingerprint"]
            for split in EVAL_SPLITS:
                tours = _eval_tours(base, split, scale.eval_tours)
                for mode in run.eval_modes:
                    ecfg = load_config(None, base + eval_overrides(out, scale, run, seed, split, mode, ckpt, tours))
                    t = time.perf_counter()
                    s = evaluate(ecfg, show_progress=progress)
                    results["runs"][f"{run.key}/seed{seed}/{split}_{mode}"] = {k: s.get(k) for k in ("tndtw", "tndtw_paper", "success")}
                    results["fingerprints"][f"{run.key}/seed{seed}/eval/{split}_{mode}"] = s["fingerprint"]
                    shown = "n/a (partial)" if s["tndtw"] is None else f"{100 * s['tndtw']:.1f}"
                    log(f"{run.key} seed {seed} {split} eval {mode}: t-nDTW {shown}, SR {100 * (s['success'] or 0):.1f} "
                        f"({time.perf_counter() - t:.0f} s)")
            # the gate: the same checkpoint, its own map mode, every instruction replaced by padding
            tours = _eval_tours(base, GATE_SPLIT, scale.eval_tours)
            t = time.perf_counter()
            s = evaluate(load_config(None, base + gate_eval_overrides(out, scale, run, seed, ckpt, tours)), show_progress=progress)
            results["fingerprints"][f"{run.key}/seed{seed}/eval/{GATE_SPLIT}_{own_mode(run)}{GATE_FOLDER_SUFFIX}"] = s["fingerprint"]
            log(f"{run.key} seed {seed} {GATE_SPLIT} eval {own_mode(run)} without instructions (the gate): SR "
                f"{100 * (s['success'] or 0):.1f} ({time.perf_counter() - t:.0f} s)")
    for agent in REFERENCE_AGENTS:  # the same tours, seeds and episode limits as the models
        ref = Run(f"reference_{agent}", "reference", ("simulator.sensors=[depth]",), ("-",))
        for seed in range(seeds):
            base = base_overrides(out, data, scale, ref, seed, device)
            for split in EVAL_SPLITS:
                tours = _eval_tours(base, split, scale.eval_tours)
                over = [o for o in eval_overrides(out, scale, ref, seed, split, "-", Path(), tours)
                        if not o.startswith(("policy.checkpoint=", "eval.agent="))]
                s = evaluate(load_config(None, base + over + [f"eval.agent={agent}"]), show_progress=progress)
                results["fingerprints"][f"{ref.key}/seed{seed}/eval/{split}_-"] = s["fingerprint"]
                shown = "n/a (partial)" if s["tndtw"] is None else f"{100 * s['tndtw']:.1f}"
                log(f"{agent} agent seed {seed} {split}: t-nDTW {shown}, SR {100 * (s['success'] or 0):.1f}")
    tables = write_tables(out, table, runs, seeds)
    cov = coverage_report(out, data, scale, log)
    elapsed = time.perf_counter() - t0
    atomic_write_text(out / "fingerprints.json", json.dumps(results["fingerprints"], indent=2, sort_keys=True))
    write_readme(out, table, scale_name, scale, seeds, device, data, elapsed, tables, cov)
    log(f"done in {elapsed / 60:.1f} min: {', '.join(str(p) for p in tables['files'])}")
    return {"tables": tables, "coverage": cov, "seconds": elapsed, "out": str(out)}


def write_readme(out: Path, table: str, scale_name: str, scale: Scale, seeds: int, device: str, data: Path, elapsed: float,
                 tables: dict, cov: dict) -> None:
    machine = machine_description()
    lines = [
        "# Reproduction of the IVLN paper's findings on the embedded benchmark",
        "",
        f"Command: `ivln-ce reproduce {table} --scale {scale_name} --seeds {seeds} --device {device} --out {out}`"
        + (f" (data in `{data}`)" if data else ""),
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores" + (f", GPU {machine['gpu']}" if machine.get("gpu") else ", no GPU")
        + f"; Python {machine['python']}, torch {machine['torch']}.",
        f"Time: {elapsed / 3600:.2f} h for the steps that ran in this invocation (reused steps cost nothing; see "
        "`reproduce.log` for every step's time).",
        "",
        f"Scale `{scale_name}`: benchmark preset `{scale.preset}`, {scale.size} px frames, {scale.epochs} epochs over "
        f"{scale.update_size or 'all'} collected episodes per model, batch {scale.batch_size}, {scale.num_envs} environments; "
        + ((f"MAP-CMA teacher-forced on `{scale.map_tf_split}`" + (
            f", then {scale.ft_rounds} DAgger rounds of {scale.ft_update_size} `train` episodes, {scale.ft_epochs} epochs each, "
            f"p = {scale.ft_p}; " if scale.ft_rounds else "; ")) if table in ("table4", "all") else "")
        + f"RedNet-18 {scale.rednet_epochs} epochs on {scale.rednet_frames} frames per train house; evaluated on "
        + (f"the first {scale.eval_tours} tours of each split" if scale.eval_tours else "every tour of each split")
        + f". The reference rows are the scripted {' and '.join(REFERENCE_AGENTS)} agents on the same tours.",
        "",
        f"Code: ivln_ce {ivln_ce.__version__}, source digest `{code_digest()[:16]}` (the `code` entry of every fingerprint).",
        "",
        "## Findings",
        "",
    ]
    lines += [f"- {v}" for v in tables.get("verdicts", [])] or ["- (no finding computed for this table)"]
    lines += ["", "## Tables", ""]
    lines += [f"- [{Path(f).name}]({Path(f).name})" for f in tables["files"]]
    if cov:
        lines += ["", "## Tour coverage", "", cov.get("summary", ""), "", f"![coverage]({Path(cov['plot']).name})" if cov.get("plot") else ""]
    lines += ["", "## Deviations from the paper's recipes", ""] + [f"- {d}" for d in DEVIATIONS]
    lines += ["", "Fingerprints of every training and evaluation: `fingerprints.json`; the full log: `reproduce.log`.", ""]
    atomic_write_text(out / "README.md", "\n".join(lines))
