"""Per-step training scalars of the global batch, and their TensorBoard logging (shared by
the episodic and the tour-sequential trainers)."""

from __future__ import annotations

import torch

from ivln_ce.training import distributed as ddp

STEP_SCALARS = ("loss", "action_loss", "progress_loss", "correct", "valid")


def step_scalars(losses: dict | None, world: int, progress: bool, device: torch.device | str = "cpu") -> dict[str, float]:
    """The global batch's losses and accuracy from every rank's slice (a collective under
    torchrun: every rank calls it, a rank without data this step with ``losses=None``). Each
    rank's losses are its share of the global mean scaled by ``world`` (``batch_losses``), so
    the global mean is their sum over ranks divided by ``world``. ``device``: the training device
(nccl reduces CUDA tensors only)."""
    values = torch.tensor([float(losses[k].detach()) if losses is not None and k in losses else 0.0 for k in STEP_SCALARS],
                          dtype=torch.float64, device=device)
    if world > 1:
        values = ddp.sum_over_ranks(values)
    v = dict(zip(STEP_SCALARS, values.tolist()))
    out = {k: v[k] / world for k in ("loss", "action_loss")}
    if progress:
        out["progress_loss"] = v["progress_loss"] / world
    if v["valid"] > 0:
        out["action_accuracy"] = v["correct"] / v["valid"]
    return out


def log_step(writer, scalars: dict[str, float], step: int, elapsed: float, batches: int) -> None:
    """Scalars of the global batch (``step_scalars``) on the global step axis."""
    for k, v in scalars.items():
        writer.add_scalar(f"train/{k}", v, step)
    writer.add_scalar("train/steps_per_s", batches / max(elapsed, 1e-9), step)
