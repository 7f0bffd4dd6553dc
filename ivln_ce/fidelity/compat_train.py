"""Training the compatibility model (``ivln-ce train-compat``): resumable, TensorBoard.

Inputs: a clean episode file (compatible pairs; paraphrase positives are the other instructions
of each path), a perturbed one from ``ivln-ce data perturb`` (incompatible pairs; made into
``OUT/perturbed_train.json.gz`` with every kind when not given) and the scenes to render.
Frames along every path are encoded once by the frozen encoders and cached
(``OUT/features/``, content-keyed: ``compat_features.py``).

Outputs in ``OUT``: ``compat.pt`` (the model after the last finished epoch; format
``ivln_ce.compat/2``), ``resume.pt`` (model, optimizer, position), ``progress.json`` (the step of
the last resume state), ``tb/`` (TensorBoard: losses, temperature, validation AUC),
``history.json``, the run marker ``ivln_run.json`` and, for perturbed files made here,
``perturbed.json`` (their SHA-256: a file that differs is made again).

Checksums: ``compat.pt`` and ``resume.pt`` hold the SHA-256 of their content
(``compat_checkpoint.py``); a damaged resume state, one of other inputs, one older than
``progress.json``, or a missing one in a folder that shows the run trained is refused, never
silently restarted. Nothing below ``OUT`` is followed through a link (``safe_paths``).

Exact resume: each batch's randomness (sampling, dropout) is seeded by (seed, epoch, batch),
and ``resume.pt`` is written after every epoch and every ``resume_every`` optimizer steps; a
run killed at any moment and started again ends with the weights of an uninterrupted run. The
folder is held for the run's lifetime (``run_folder.hold``), and a folder made by a run with
other inputs (config, data, scenes, code) is refused.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from ivln_ce import fingerprint as fpr
from ivln_ce import run_folder
from ivln_ce.data.episodes import EpisodeDataset, load_episodes
from ivln_ce.data.jsonio import DataFormatError, parse_document, write_json
from ivln_ce.fidelity.compat_checkpoint import check_tensors, read_sealed, save_sealed
from ivln_ce.fidelity.compat_checks import MAX_SEED, check_device, check_float, check_int
from ivln_ce.fidelity.compat_data import CLEAN, CompatPair, MixSampler, clean_path_index, exclusion_matrix, pairs_of
from ivln_ce.fidelity.compat_features import FeatureCache, FrameEncoder, ViewSettings, scene_digest, trajectory_batch
from ivln_ce.fidelity.compat_model import MAX_WIDTH, CompatibilityModel, CompatModelConfig, compatibility_loss
from ivln_ce.fidelity.compat_score import CHECKPOINT_FORMAT, encode_texts, score_pairs, summarise
from ivln_ce.safe_paths import check_regular, inside, make_dirs, read_regular

RESUME_FILE = "resume.pt"
RESUME_FORMAT = "ivln_ce.compat_resume/1"
CHECKPOINT_FILE = "compat.pt"
HISTORY_FILE = "history.json"
PROGRESS_FILE = "progress.json"
PROGRESS_FORMAT = "ivln_ce.compat_progress/1"
PERTURBED_RECORD = "perturbed.json"
PERTURBED_FORMAT = "ivln_ce.compat_perturbed/1"
#: the small JSON records of the run folder are at most this large
MAX_RECORD_BYTES = 1 << 20
MAX_EPOCHS = 1_000_000
MAX_BATCH = 4096


class CompatTrainError(RuntimeError):
    pass


@dataclass
class CompatTrainConfig:
    episodes: str
    scenes_dir: str
    out: str
    perturbed: str | None = None
    val_episodes: str | None = None
    val_perturbed: str | None = None
    epochs: int = 10
    batch_size: int = 16
    lr: float = 1e-3
    seed: int = 0
    gamma: float = 2.0
    beta: float = 1.0
    mix: tuple[int, int, int] = (2, 1, 1)
    resume_every: int = 0
    device: str = "cpu"
    views: ViewSettings = field(default_factory=ViewSettings)
    embedding_size: int = 64
    hidden_size: int = 128
    projection_size: int = 128
    dropout: float = 0.1

    def check(self) -> None:
        """Types and ranges of every setting (finite hyperparameters, bounded sizes, a device
        torch has), the input files and folders: before anything is read or written."""
        check_int("--epochs", self.epochs, 1, MAX_EPOCHS)
        check_int("--batch-size", self.batch_size, 4, MAX_BATCH)
        check_float("--lr", self.lr, 0.0, 10.0, lo_open=True)
        check_int("--seed", self.seed, 0, MAX_SEED)
        check_float("--gamma", self.gamma, 0.0, 100.0)
        check_float("--beta", self.beta, 0.0, 1e6)
        check_int("--resume-every", self.resume_every, 0, 10**12)
        if not isinstance(self.mix, (tuple, list)) or len(self.mix) != 3:
            raise ValueError(f"--mix: expected three weights GROUND_TRUTH INSTRUCTION TRAJECTORY, got {self.mix!r}")
        for w in self.mix:
            check_int("--mix", w, 0, 1000)
        if self.mix[0] < 1:
            raise ValueError(f"--mix {' '.join(map(str, self.mix))}: the ground-truth weight must be at least 1")
        for name in ("embedding_size", "hidden_size", "projection_size"):
            check_int(name, getattr(self, name), 1, MAX_WIDTH)
        check_float("dropout", self.dropout, 0.0, 0.99)
        if not isinstance(self.views, ViewSettings):
            raise ValueError(f"views: expected ViewSettings, got {type(self.views).__name__}")
        check_device("--device", self.device)
        for name in ("episodes", "perturbed", "val_episodes", "val_perturbed"):
            v = getattr(self, name)
            if v is not None and not Path(v).is_file():
                raise FileNotFoundError(f"--{name.replace('_', '-')} {v}: no such file")
        if not Path(self.scenes_dir).is_dir():
            raise FileNotFoundError(f"--scenes-dir {self.scenes_dir}: no such folder")
        if self.val_perturbed is not None and self.val_episodes is None:
            raise ValueError("--val-perturbed needs --val-episodes (the clean file it was made from)")


@dataclass
class TrainState:
    epoch: int = 0  # epochs finished
    batch: int = 0  # batches of epoch ``epoch`` finished
    step: int = 0  # optimizer steps
    history: list = field(default_factory=list)


def _fingerprint(cfg: CompatTrainConfig, datasets: list[tuple[str, EpisodeDataset]]) -> str:
    """The inputs of the run: config, input files and RGB weights by content, the scenes of the
    episodes by their files' digests, the package code and version."""
    tree = asdict(cfg)
    for cosmetic in ("out", "device", "resume_every"):
        tree.pop(cosmetic)
    files = {k: getattr(cfg, k) for k in ("episodes", "perturbed", "val_episodes", "val_perturbed")}
    files["rgb_weights"] = cfg.views.rgb_weights or None
    scenes: dict[str, str] = {}
    for where, ds in datasets:
        for e in ds.episodes:
            if e.scene_id not in scenes:
                try:
                    scenes[e.scene_id] = scene_digest(cfg.scenes_dir, e.scene_id)
                except ValueError as exc:  # an id leading out of the scenes folder
                    raise DataFormatError(f"{where}: episode {e.episode_id}: field scene_id: {exc}") from None
    return fpr.digest({"config": tree, "files": fpr.data_files(files), "scenes": scenes, "code": fpr.code_digest(),
                       "version": fpr.ivln_ce.__version__})


def _entry(out: Path, name: str) -> Path:
    """``out/name``, refused when it is a link, or anything but a plain file where one exists."""
    path = inside(out, name)
    if path.exists() or path.is_symlink():
        check_regular(path)
    return path


def _read_record(out: Path, name: str, fmt: str) -> dict | None:
    """A small JSON record of the run folder (None when missing); a damaged one is refused."""
    path = _entry(out, name)
    if not path.exists():
        return None
    try:
        doc = parse_document(read_regular(path, MAX_RECORD_BYTES), path)
    except ValueError as exc:
        raise CompatTrainError(f"{path}: damaged ({exc}); train into another --out") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise CompatTrainError(f"{path}: damaged (not a {fmt} record); train into another --out")
    return doc


def _claim(out: Path, fingerprint: str) -> None:
    marker_file = _entry(out, run_folder.RUN_MARKER)
    marker = run_folder.read_marker(out)
    if marker is None and marker_file.exists():
        raise CompatTrainError(f"{marker_file}: damaged run marker (it should name the run's fingerprint); "
                               f"train into another --out")
    if marker is not None:
        if marker["fingerprint"] != fingerprint:
            raise CompatTrainError(f"{out} holds a train-compat run started with other inputs (config, data or code differ; "
                                   f"{run_folder.RUN_MARKER}); resume it with the same inputs, or train into another --out")
        return
    foreign = run_folder.foreign_entries(out, (run_folder.LOCK_FILE,))
    if foreign:
        raise CompatTrainError(f"{out}: --out is not empty ({', '.join(foreign)}) and holds no ivln-ce training run "
                               f"({run_folder.RUN_MARKER} missing); train into a new or empty folder")
    run_folder.write_marker(out, fingerprint)


def _perturbed_file(given: str | None, clean: str, out: Path, name: str, cfg: CompatTrainConfig, fingerprint: str,
                    show: bool, log: Callable[[str], None]) -> Path:
    """The given perturbed file, or ``OUT/name`` made by ``data perturb`` (every kind). A file
    made here is reused only when its SHA-256 is the one recorded when it was made
    (``perturbed.json``); otherwise it is made again (the same seed gives the same file)."""
    if given is not None:
        return Path(given)
    stem = name[: -len(".json.gz")]
    target = _entry(out, name)
    for beside in (f"{stem}_gt.json.gz", f"{stem}_stats.json"):  # data perturb writes these too
        _entry(out, beside)
    record = _read_record(out, PERTURBED_RECORD, PERTURBED_FORMAT) or {}
    made = record.get("files") if record.get("fingerprint") == fingerprint and isinstance(record.get("files"), dict) else {}
    if target.exists():
        if made.get(name) == fpr.sha256_file(target):
            return target
        log(f"{target}: not the file this run made (no matching SHA-256 in {PERTURBED_RECORD}); making it again")
    from ivln_ce.benchmark.perturb import PerturbRequest, build_perturbed

    build_perturbed(PerturbRequest(episodes=Path(clean), out=target, seed=cfg.seed, scenes_dir=Path(cfg.scenes_dir)),
                    show_progress=show)
    made = {**made, name: fpr.sha256_file(target)}
    write_json(_entry(out, PERTURBED_RECORD), {"format": PERTURBED_FORMAT, "fingerprint": fingerprint, "files": made})
    return target


def _load_pairs(clean_file: str, clean_ds: EpisodeDataset,
                perturbed_file: Path) -> tuple[list[CompatPair], list[CompatPair], list[str]]:
    clean = pairs_of(clean_ds, clean_file)
    if any(p.kind != CLEAN for p in clean):
        raise CompatTrainError(f"{clean_file}: holds perturbed episodes; give the clean file with --episodes")
    pert_ds = load_episodes(perturbed_file)
    pert = pairs_of(pert_ds, str(perturbed_file), clean_path_index(clean, clean_ds))
    clean_eps = {p.episode_id for p in clean}
    strays = [p.episode_id for p in pert if p.kind == CLEAN or p.source_episode_id not in clean_eps]
    if strays:
        raise CompatTrainError(f"{perturbed_file}: episode(s) {strays[:5]} are clean or were not made from {clean_file} "
                               f"(perturbation.source_episode_id); give the file `data perturb` wrote for it")
    missing = [p.episode_id for p in pert if p.family == "trajectory" and not p.describes]
    if missing:
        raise CompatTrainError(f"{perturbed_file}: episode(s) {missing[:5]}: perturbation.source_trajectory_id names no path "
                               f"of {clean_file}")
    vocab = clean_ds.vocab
    if vocab is None:
        raise CompatTrainError(f"{clean_file}: no instruction_vocab (the model's vocabulary comes from it)")
    return clean, pert, list(vocab.words)


def _save_resume(out: Path, fingerprint: str, state: TrainState, model, opt, writer) -> None:
    """``resume.pt`` (sealed), then ``progress.json`` with its step: a killed run leaves a state
    at least as new as the record, and a state older than the record is refused."""
    if writer is not None:
        writer.flush()
    save_sealed({"format": RESUME_FORMAT, "fingerprint": fingerprint, "state": asdict(state), "model": model.state_dict(),
                 "optim": opt.state_dict()}, _entry(out, RESUME_FILE))
    write_json(_entry(out, PROGRESS_FILE), {"format": PROGRESS_FORMAT, "fingerprint": fingerprint, "step": state.step})


def _refuse(path: Path, why: str) -> CompatTrainError:
    return CompatTrainError(f"{path}: {why}; restore the run's files, or train into another --out")


def _check_optimizer(opt, lr: float) -> None:
    """The loaded optimizer: the run's learning rate, finite moments."""
    for g in opt.param_groups:
        if g.get("lr") != lr:
            raise ValueError(f"optim: learning rate {g.get('lr')!r}, the run's is {lr!r}")
    for per_param in opt.state.values():
        for name, v in per_param.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all()):
                raise ValueError(f"optim.state.{name}: values that are not finite")


def _load_resume(out: Path, fingerprint: str, model, opt, epochs: int, batches: int, lr: float) -> TrainState | None:
    """The run's resume state, checked; None for a run that has not saved one yet."""
    from ivln_ce.models.official_weights import load_state

    f = _entry(out, RESUME_FILE)
    progress = _read_record(out, PROGRESS_FILE, PROGRESS_FORMAT)
    if not f.exists():
        shown = [n for n in (PROGRESS_FILE, CHECKPOINT_FILE, HISTORY_FILE) if _entry(out, n).exists()]
        if shown:
            raise _refuse(f, f"the resume state is missing, but {', '.join(shown)} show(s) that this run trained")
        return None
    saved = read_sealed(f, "train-compat resume state", RESUME_FORMAT)
    if saved.get("fingerprint") != fingerprint:
        raise CompatTrainError(f"{f}: a resume state of another run (other inputs); train into another --out")
    s = saved.get("state")
    try:
        state = TrainState(check_int("state.epoch", s["epoch"], 0, epochs), check_int("state.batch", s["batch"], 0, batches),
                           check_int("state.step", s["step"], 0, 10**15), s["history"])
        if not isinstance(state.history, list):
            raise ValueError("state.history: expected a list")
        load_state(model, check_tensors(saved.get("model"), f, "model"), str(f), strict=True)
        opt.load_state_dict(saved["optim"])
        _check_optimizer(opt, lr)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise _refuse(f, f"damaged resume state ({exc})") from None
    if progress is not None:
        recorded = progress.get("step")
        if progress.get("fingerprint") != fingerprint or not isinstance(recorded, int) or isinstance(recorded, bool):
            raise _refuse(_entry(out, PROGRESS_FILE), "damaged progress record (fingerprint or step)")
        if recorded > state.step:
            raise _refuse(f, f"an older resume state (step {state.step}) than the run reached ({PROGRESS_FILE}: step {recorded})")
    return state


def _save_checkpoint(out: Path, model, cfg: CompatTrainConfig, mcfg: CompatModelConfig, vocab: list[str], state: TrainState) -> None:
    train = {k: v for k, v in asdict(cfg).items() if k != "views"}
    rgb = cfg.views.rgb_weights
    save_sealed({"format": CHECKPOINT_FORMAT, "state_dict": model.state_dict(), "model": mcfg.to_dict(),
                 "views": cfg.views.to_dict(), "rgb_weights_sha256": fpr.sha256_file(rgb) if rgb else None, "vocab": vocab,
                 "epoch": state.epoch, "step": state.step, "history": json.loads(json.dumps(state.history)),
                 "train": json.loads(json.dumps(train))}, _entry(out, CHECKPOINT_FILE))


def _save_outputs(out: Path, model, cfg: CompatTrainConfig, mcfg: CompatModelConfig, vocab: list[str], state: TrainState) -> None:
    _save_checkpoint(out, model, cfg, mcfg, vocab, state)
    write_json(_entry(out, HISTORY_FILE), state.history, indent=2)


def train_compat(cfg: CompatTrainConfig, show_progress: bool = True,
                 on_step: Callable[[int], None] | None = None, log: Callable[[str], None] = print) -> dict:
    """Train (or resume) into ``cfg.out``; returns a summary. ``on_step(step)`` is called after
    every optimizer step and its resume point (tests stop a run there)."""
    cfg.check()
    out = Path(cfg.out)
    for name in (run_folder.LOCK_FILE, run_folder.RUN_MARKER):  # the lock and marker are opened by run_folder
        _entry(out, name)
    with run_folder.hold(out, "train-compat run"):
        return _train(cfg, out, show_progress, on_step, log)


def _train(cfg: CompatTrainConfig, out: Path, show: bool, on_step, log) -> dict:
    clean_ds = load_episodes(cfg.episodes)
    val_ds = load_episodes(cfg.val_episodes) if cfg.val_episodes is not None else None
    fingerprint = _fingerprint(cfg, [(cfg.episodes, clean_ds)] + ([(cfg.val_episodes, val_ds)] if val_ds is not None else []))
    _claim(out, fingerprint)
    perturbed = _perturbed_file(cfg.perturbed, cfg.episodes, out, "perturbed_train.json.gz", cfg, fingerprint, show, log)
    clean, pert, vocab_words = _load_pairs(cfg.episodes, clean_ds, perturbed)
    val = None
    if cfg.val_episodes is not None:
        vp = _perturbed_file(cfg.val_perturbed, cfg.val_episodes, out, "perturbed_val.json.gz", cfg, fingerprint, show, log)
        val_clean, val_pert, _ = _load_pairs(cfg.val_episodes, val_ds, vp)
        val = val_clean + val_pert
    try:
        sampler = MixSampler(clean, pert, cfg.batch_size, cfg.seed, tuple(cfg.mix))
    except ValueError as exc:
        raise ValueError(f"--batch-size {cfg.batch_size}, --mix {' '.join(map(str, cfg.mix))}: {exc}") from None
    device = cfg.device
    from ivln_ce.data.vocab import Vocabulary

    vocab = Vocabulary(vocab_words)
    try:
        mcfg = CompatModelConfig(len(vocab), FrameEncoder.feature_dim_of(cfg.views), cfg.views.views, cfg.embedding_size,
                                 cfg.hidden_size, cfg.projection_size, cfg.dropout)
    except ValueError as exc:  # sizes beyond the caps: before any frame is rendered
        raise ValueError(f"{cfg.episodes}: the model of this vocabulary and these settings: {exc}") from None
    tb_dir = make_dirs(out, "tb")
    encoder = FrameEncoder(cfg.views, cfg.scenes_dir, device)
    try:
        cache = FeatureCache(encoder, out, ("features",))
        t0 = time.perf_counter()
        cache.fill([p.path for p in clean + pert + (val or [])], show_progress=show)
        feature_s = time.perf_counter() - t0
        log(f"{cache.summary()} ({feature_s:.1f} s)")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(cfg.seed))
            model = CompatibilityModel(mcfg).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        state = _load_resume(out, fingerprint, model, opt, cfg.epochs, sampler.batches_per_epoch(), cfg.lr)
    except BaseException:
        encoder.close()
        raise
    resumed = state is not None
    state = state or TrainState()
    if resumed:
        log(f"resumed {out} at epoch {state.epoch + 1}, batch {state.batch} (step {state.step})")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tb_dir), purge_step=state.step + 1 if resumed else None)
    t_train = time.perf_counter()
    trained = False
    try:
        for epoch in range(state.epoch, cfg.epochs):
            batches = sampler.epoch(epoch)
            model.train()
            losses = []
            bar = tqdm(range(state.batch, len(batches)), desc=f"epoch {epoch + 1}/{cfg.epochs}", unit="batch",
                       disable=not show or None, leave=False)
            for b in bar:
                trained = True
                items = batches[b]
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(int(np.random.default_rng([cfg.seed, epoch, b, 7]).integers(2**62)))
                    tokens = encode_texts([it.instruction.text for it in items], vocab, device)
                    tb = trajectory_batch([it.trajectory.path for it in items], cache.get, cfg.views, device)
                    hw = model.encode_instructions(tokens)
                    hv = model.encode_trajectories(tb.views, tb.orientation, tb.geometry, tb.lengths)
                    s = model.similarity(hw, hv)
                    matched = torch.tensor([it.label for it in items], device=s.device)
                    exclude = torch.from_numpy(exclusion_matrix(items)).to(s.device)
                    parts = compatibility_loss(s, matched, model.a, model.b, model.inv_tau(), cfg.gamma, cfg.beta, exclude)
                    opt.zero_grad()
                    parts.total.backward()
                    opt.step()
                state.step += 1
                state.batch = b + 1
                losses.append(float(parts.total.detach()))
                writer.add_scalar("train/loss", losses[-1], state.step)
                writer.add_scalar("train/contrastive_loss", float(parts.contrastive.detach()), state.step)
                writer.add_scalar("train/focal_loss", float(parts.classification.detach()), state.step)
                writer.add_scalar("train/tau", float(1.0 / model.inv_tau().detach()), state.step)
                bar.set_postfix(loss=f"{np.mean(losses[-10:]):.3f}")
                if cfg.resume_every and state.step % cfg.resume_every == 0 and state.batch < len(batches):
                    _save_resume(out, fingerprint, state, model, opt, writer)
                if on_step is not None:
                    on_step(state.step)
            record = {"epoch": epoch + 1, "step": state.step, "loss": float(np.mean(losses)) if losses else None}
            if val is not None:
                scores, _ = score_pairs(model, val, cache, cfg.views, vocab, device=device)
                summary = summarise(val, scores, [p.label for p in val])
                record["val_auc"] = summary.auc
                record["val_auc_by_family"] = summary.auc_by_family
                writer.add_scalar("val/auc", summary.auc, epoch + 1)
                for fam, v in summary.auc_by_family.items():
                    if v is not None:
                        writer.add_scalar(f"val/auc_{fam}", v, epoch + 1)
            state.history.append(record)
            state.epoch, state.batch = epoch + 1, 0
            loss = "-" if record["loss"] is None else f"{record['loss']:.4f}"
            val_auc = record.get("val_auc")
            log(f"epoch {epoch + 1}: loss {loss}" + (f", val AUC {val_auc:.3f}" if val_auc is not None else ""))
            # the resume state first: compat.pt or history.json never exist without one
            _save_resume(out, fingerprint, state, model, opt, writer)
            _save_outputs(out, model, cfg, mcfg, vocab_words, state)
        if resumed and state.epoch == cfg.epochs and not trained:
            _save_outputs(out, model, cfg, mcfg, vocab_words, state)  # a run killed between its last two writes
    finally:
        writer.close()
        encoder.close()
    return {"out": str(out), "checkpoint": str(_entry(out, CHECKPOINT_FILE)), "epochs": state.epoch, "steps": state.step,
            "history": state.history, "feature_seconds": round(feature_s, 1),
            "train_seconds_this_run": round(time.perf_counter() - t_train, 1), "pairs": {"clean": len(clean), "perturbed": len(pert)}}
