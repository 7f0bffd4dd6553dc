"""Training RedNet on frames rendered from synthetic houses (``ivln-ce train-rednet``).

Frames (RGB, normalised depth, 13-class labels) are rendered at random navigable poses and
headings of the train houses of a synthetic preset, and of its held-out (val_unseen) houses
for evaluation, and cached as ``.npz`` files. Training uses cross entropy on the full-
resolution logits plus the four deep-supervision heads (on downsampled labels), Adam, and
saves ``checkpoint.pt`` atomically after every epoch (``--resume`` continues from it; it is
read with the allow-listed, data-only loader of ``models.official_weights``). The
evaluation reports mean IoU over the classes present in the held-out frames and the
confusion matrix. Checkpoints hold ``model_state`` like the official file, so
``models.official_weights.load_rednet`` reads them.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ivln_ce.benchmark.synthetic import PRESETS, _house_seed
from ivln_ce.config import load_config
from ivln_ce.data.jsonio import atomic_write_text
from ivln_ce.models.official_weights import load_state, read_checkpoint
from ivln_ce.models.rednet import NUM_CLASSES, RedNet, mean_iou, normalise_inputs
from ivln_ce.scenes.categories import CLASS_NAMES
from ivln_ce.scenes.layout import generate_house
from ivln_ce.scenes.mesh import Scene, layout_mesh
from ivln_ce.sim.embedded import EmbeddedSimulator


@dataclass
class RedNetTrainConfig:
    out: str
    preset: str = "small"
    seed: int = 0
    size: int = 128  # rendered frame size (RGB, depth and labels)
    frames_per_house: int = 60
    encoder_depth: int = 18
    epochs: int = 4
    batch_size: int = 8
    lr: float = 2e-4
    max_train_houses: int | None = None
    max_eval_houses: int | None = None


def render_frames(house_seeds: list[int], frames_per_house: int, size: int, seed: int, desc: str) -> dict[str, np.ndarray]:
    cfg = load_config(None, ["simulator.renderer=auto", "simulator.sensors=[rgb,depth,semantic]"]
                      + [f"simulator.{n}.{d}={size}" for n in ("rgb", "depth", "semantic") for d in ("width", "height")]).simulator
    rgb, depth, labels = [], [], []
    rng = np.random.default_rng(seed)
    sim = EmbeddedSimulator(cfg)
    for hs in tqdm(house_seeds, desc=desc, unit="house"):
        layout = generate_house(hs)
        sim.load_scene_object(Scene(layout, layout_mesh(layout)))
        for _ in range(frames_per_house):
            sim.set_agent_state(sim.sample_navigable_point(rng), rng.uniform(-math.pi, math.pi))
            obs = sim.get_observations()
            rgb.append(obs.rgb)
            depth.append(obs.depth)
            labels.append(obs.semantic12)
    sim.close()
    return {"rgb": np.stack(rgb), "depth": np.stack(depth), "labels": np.stack(labels)}


def _cached_frames(path: Path, make) -> dict[str, np.ndarray]:
    if path.exists():
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    data = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
    os.close(fd)
    np.savez_compressed(tmp, **data)
    os.replace(tmp, path)
    return data


def _atomic_save(obj, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    torch.save(obj, tmp)
    os.replace(tmp, path)


@torch.no_grad()
def evaluate(model: RedNet, frames: dict[str, np.ndarray], batch_size: int = 16) -> tuple[float, np.ndarray, np.ndarray]:
    model.eval()
    conf = torch.zeros(NUM_CLASSES, NUM_CLASSES, dtype=torch.long)
    for i in range(0, len(frames["labels"]), batch_size):
        x, d = normalise_inputs(torch.from_numpy(frames["rgb"][i : i + batch_size]), torch.from_numpy(frames["depth"][i : i + batch_size]))
        pred = model(x, d).argmax(1).flatten()
        gt = torch.from_numpy(frames["labels"][i : i + batch_size]).long().flatten()
        conf += torch.bincount(gt * NUM_CLASSES + pred, minlength=NUM_CLASSES**2).view(NUM_CLASSES, NUM_CLASSES)
    miou, iou = mean_iou(conf)
    return miou, iou.numpy(), conf.numpy()


def train_rednet(cfg: RedNetTrainConfig, resume: bool = True, log=print) -> dict:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    preset = PRESETS[cfg.preset]
    train_seeds = [_house_seed(cfg.seed, k) for k in range(preset.train_houses)][: cfg.max_train_houses]
    eval_seeds = [_house_seed(cfg.seed, preset.train_houses + k) for k in range(preset.val_unseen_houses)][: cfg.max_eval_houses]
    ckpt_path = out / "checkpoint.pt"
    # read a checkpoint to resume from before the (slow) frame rendering: a bad or unsafe file
    # fails at once; the reader only unpickles data (an allow-list, never arbitrary globals)
    ckpt = read_checkpoint(ckpt_path) if resume and ckpt_path.exists() else None
    if ckpt is not None:
        missing = {"model_state", "optim_state", "epoch", "history"} - set(ckpt)
        if missing:
            raise ValueError(f"{ckpt_path}: not a train-rednet checkpoint: no {sorted(missing)} (delete it or pass resume=False)")
    t0 = time.perf_counter()
    train = _cached_frames(out / f"frames_train_{cfg.size}.npz", lambda: render_frames(train_seeds, cfg.frames_per_house, cfg.size, cfg.seed, "frames train"))
    held = _cached_frames(out / f"frames_val_unseen_{cfg.size}.npz", lambda: render_frames(eval_seeds, max(10, cfg.frames_per_house // 2), cfg.size, cfg.seed + 1, "frames val_unseen"))
    render_s = time.perf_counter() - t0
    torch.manual_seed(cfg.seed)
    model = RedNet(depth=cfg.encoder_depth)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    start_epoch, history = 0, []
    if ckpt is not None:
        load_state(model, ckpt["model_state"], str(ckpt_path), strict=True)
        opt.load_state_dict(ckpt["optim_state"])
        start_epoch, history = ckpt["epoch"], ckpt["history"]
        log(f"resumed from {ckpt_path} after epoch {start_epoch}")
    # class weights: inverse sqrt frequency, so rare furniture is not drowned by walls and floors
    counts = np.bincount(train["labels"].ravel(), minlength=NUM_CLASSES).astype(float)
    weights = torch.tensor(1.0 / np.sqrt(np.maximum(counts, 1.0)), dtype=torch.float32)
    weights = weights / weights.mean()
    g = torch.Generator().manual_seed(cfg.seed)
    n = len(train["labels"])
    t_train = time.perf_counter()
    for epoch in range(start_epoch, cfg.epochs):
        model.train()
        order = torch.randperm(n, generator=g)
        losses = []
        bar = tqdm(range(0, n - cfg.batch_size + 1, cfg.batch_size), desc=f"epoch {epoch + 1}/{cfg.epochs}", unit="batch")
        for i in bar:
            idx = order[i : i + cfg.batch_size].numpy()
            x, d = normalise_inputs(torch.from_numpy(train["rgb"][idx]), torch.from_numpy(train["depth"][idx]))
            y = torch.from_numpy(train["labels"][idx]).long()
            logits, side = model(x, d, deep_supervision=True)
            loss = F.cross_entropy(logits, y, weight=weights)
            for s in side:
                ys = F.interpolate(y[:, None].float(), size=s.shape[-2:], mode="nearest")[:, 0].long()
                loss = loss + 0.25 * F.cross_entropy(s, ys, weight=weights)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
        miou, iou, conf = evaluate(model, held)
        history.append({"epoch": epoch + 1, "loss": float(np.mean(losses)), "miou": miou})
        log(f"epoch {epoch + 1}: loss {np.mean(losses):.3f}, val_unseen mIoU {100 * miou:.1f}")
        _atomic_save({"model_state": model.state_dict(), "optim_state": opt.state_dict(), "epoch": epoch + 1, "history": history, "config": asdict(cfg)}, ckpt_path)
    train_s = time.perf_counter() - t_train
    miou, iou, conf = evaluate(model, held)
    per_class = {CLASS_NAMES[c]: (None if math.isnan(v) else float(v)) for c, v in enumerate(iou)}
    report = {
        "miou": miou,
        "per_class_iou": per_class,
        "confusion": conf.tolist(),
        "train_frames": n,
        "eval_frames": len(held["labels"]),
        "render_seconds": round(render_s, 1),
        "train_seconds_this_run": round(train_s, 1),
        "history": history,
        "config": asdict(cfg),
    }
    atomic_write_text(out / "report.json", json.dumps(report, indent=2))
    return report
