"""Training the compatibility model (``ivln-ce train-compat``): resumable, TensorBoard.

Inputs: a clean episode file (compatible pairs; paraphrase positives are the other instructions
of each path), a perturbed one from ``ivln-ce data perturb`` (incompatible pairs; made into
``OUT/perturbed_train.json.gz`` with every kind when not given) and the scenes to render.
Frames along every path are encoded once by the frozen encoders and cached
(``OUT/features/``, content-keyed: ``compat_features.py``).

Outputs in ``OUT``: ``compat.pt`` (the model after the last finished epoch; format
``ivln_ce.compat/1``), ``resume.pt`` (model, optimizer, position), ``tb/`` (TensorBoard:
losses, temperature, validation AUC), ``history.json`` and the run marker ``ivln_run.json``.

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
from ivln_ce.data.episodes import load_episodes
from ivln_ce.data.jsonio import write_json
from ivln_ce.fidelity.compat_data import (CLEAN, CompatPair, MixSampler, clean_path_index, exclusion_matrix,
                                          pairs_of)
from ivln_ce.fidelity.compat_features import FeatureCache, FrameEncoder, ViewSettings, trajectory_batch
from ivln_ce.fidelity.compat_model import CompatibilityModel, CompatModelConfig, compatibility_loss
from ivln_ce.fidelity.compat_score import CHECKPOINT_FORMAT, encode_texts, score_pairs, summarise

RESUME_FILE = "resume.pt"
CHECKPOINT_FILE = "compat.pt"


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
        if self.epochs < 1 or self.batch_size < 4 or not self.lr > 0 or self.gamma < 0 or self.beta < 0 or self.resume_every < 0:
            raise ValueError(f"need epochs >= 1, batch size >= 4, lr > 0, gamma >= 0, beta >= 0, resume_every >= 0; got "
                             f"{self.epochs}, {self.batch_size}, {self.lr}, {self.gamma}, {self.beta}, {self.resume_every}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {self.device}: torch sees no CUDA device; use cpu")
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


def _fingerprint(cfg: CompatTrainConfig) -> str:
    tree = asdict(cfg)
    for cosmetic in ("out", "device", "resume_every"):
        tree.pop(cosmetic)
    files = {k: getattr(cfg, k) for k in ("episodes", "perturbed", "val_episodes", "val_perturbed")}
    return fpr.digest({"config": tree, "files": fpr.data_files(files), "code": fpr.code_digest(),
                       "version": fpr.ivln_ce.__version__})


def _claim(out: Path, fingerprint: str) -> None:
    marker = run_folder.read_marker(out)
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


def _perturbed_file(given: str | None, clean: str, out: Path, name: str, cfg: CompatTrainConfig, show: bool) -> Path:
    """The given perturbed file, or ``OUT/name`` made by ``data perturb`` (every kind) when missing."""
    if given is not None:
        return Path(given)
    target = out / name
    if not target.exists():
        from ivln_ce.benchmark.perturb import PerturbRequest, build_perturbed

        build_perturbed(PerturbRequest(episodes=Path(clean), out=target, seed=cfg.seed, scenes_dir=Path(cfg.scenes_dir)),
                        show_progress=show)
    return target


def _load_pairs(clean_file: str, perturbed_file: Path) -> tuple[list[CompatPair], list[CompatPair], list[str]]:
    clean_ds = load_episodes(clean_file)
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
    from ivln_ce.models.factory import atomic_torch_save

    if writer is not None:
        writer.flush()
    atomic_torch_save({"fingerprint": fingerprint, "state": asdict(state), "model": model.state_dict(),
                       "optim": opt.state_dict()}, out / RESUME_FILE)


def _load_resume(out: Path, fingerprint: str, model, opt) -> TrainState | None:
    from ivln_ce.models.official_weights import read_checkpoint

    f = out / RESUME_FILE
    if not f.exists():
        return None
    saved = read_checkpoint(f)
    if saved.get("fingerprint") != fingerprint:
        raise CompatTrainError(f"{f}: a resume state of another run (other inputs); train into another --out")
    try:
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optim"])
        s = saved["state"]
        return TrainState(int(s["epoch"]), int(s["batch"]), int(s["step"]), list(s["history"]))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CompatTrainError(f"{f}: damaged resume state ({exc}); train into another --out") from exc


def _save_checkpoint(out: Path, model, cfg: CompatTrainConfig, mcfg: CompatModelConfig, vocab: list[str], state: TrainState) -> None:
    from ivln_ce.models.factory import atomic_torch_save

    train = {k: v for k, v in asdict(cfg).items() if k != "views"}
    atomic_torch_save({"format": CHECKPOINT_FORMAT, "state_dict": model.state_dict(), "model": mcfg.to_dict(),
                       "views": cfg.views.to_dict(), "vocab": vocab, "epoch": state.epoch, "step": state.step,
                       "history": json.loads(json.dumps(state.history)), "train": json.loads(json.dumps(train))},
                      out / CHECKPOINT_FILE)


def train_compat(cfg: CompatTrainConfig, show_progress: bool = True,
                 on_step: Callable[[int], None] | None = None, log: Callable[[str], None] = print) -> dict:
    """Train (or resume) into ``cfg.out``; returns a summary. ``on_step(step)`` is called after
    every optimizer step and its resume point (tests stop a run there)."""
    cfg.check()
    out = Path(cfg.out)
    with run_folder.hold(out, "train-compat run"):
        return _train(cfg, out, show_progress, on_step, log)


def _train(cfg: CompatTrainConfig, out: Path, show: bool, on_step, log) -> dict:
    fingerprint = _fingerprint(cfg)
    _claim(out, fingerprint)
    perturbed = _perturbed_file(cfg.perturbed, cfg.episodes, out, "perturbed_train.json.gz", cfg, show)
    clean, pert, vocab_words = _load_pairs(cfg.episodes, perturbed)
    val = None
    if cfg.val_episodes is not None:
        vp = _perturbed_file(cfg.val_perturbed, cfg.val_episodes, out, "perturbed_val.json.gz", cfg, show)
        val_clean, val_pert, _ = _load_pairs(cfg.val_episodes, vp)
        val = val_clean + val_pert
    sampler = MixSampler(clean, pert, cfg.batch_size, cfg.seed, tuple(cfg.mix))
    device = cfg.device
    encoder = FrameEncoder(cfg.views, cfg.scenes_dir, device)
    cache = FeatureCache(encoder, out / "features")
    t0 = time.perf_counter()
    cache.fill([p.path for p in clean + pert + (val or [])], show_progress=show)
    feature_s = time.perf_counter() - t0
    log(f"path features: {cache.computed} computed, {cache.reused} reused from {out / 'features'} ({feature_s:.1f} s)")
    from ivln_ce.data.vocab import Vocabulary

    vocab = Vocabulary(vocab_words)
    mcfg = CompatModelConfig(len(vocab), encoder.feature_dim, cfg.views.views, cfg.embedding_size, cfg.hidden_size,
                             cfg.projection_size, cfg.dropout)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(cfg.seed))
        model = CompatibilityModel(mcfg).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    state = _load_resume(out, fingerprint, model, opt)
    resumed = state is not None
    state = state or TrainState()
    if resumed:
        log(f"resumed {out} at epoch {state.epoch + 1}, batch {state.batch} (step {state.step})")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(out / "tb"), purge_step=state.step + 1 if resumed else None)
    t_train = time.perf_counter()
    try:
        for epoch in range(state.epoch, cfg.epochs):
            batches = sampler.epoch(epoch)
            model.train()
            losses = []
            bar = tqdm(range(state.batch, len(batches)), desc=f"epoch {epoch + 1}/{cfg.epochs}", unit="batch",
                       disable=not show or None, leave=False)
            for b in bar:
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
            log(f"epoch {epoch + 1}: loss {record['loss']:.4f}" + (f", val AUC {record['val_auc']:.3f}" if val is not None else ""))
            _save_checkpoint(out, model, cfg, mcfg, vocab_words, state)
            write_json(out / "history.json", state.history, indent=2)
            _save_resume(out, fingerprint, state, model, opt, writer)
    finally:
        writer.close()
        encoder.close()
    return {"out": str(out), "checkpoint": str(out / CHECKPOINT_FILE), "epochs": state.epoch, "steps": state.step,
            "history": state.history, "feature_seconds": round(feature_s, 1),
            "train_seconds_this_run": round(time.perf_counter() - t_train, 1), "pairs": {"clean": len(clean), "perturbed": len(pert)}}
