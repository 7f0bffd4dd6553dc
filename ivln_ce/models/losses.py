"""Training losses of the CMA family (SPEC §8.7, §9.4)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def progress_monitor_loss(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor, official_broadcast: bool = False) -> torch.Tensor:
    """MSE of the progress head over valid steps.

    pred (T*B,) after tanh; target (T*B,) or (T*B, 1); valid (T*B,) bool (False on padding).
    ``official_broadcast`` reproduces defect T1: the official (T*B,) - (T*B, 1) broadcast makes
    a (T*B x T*B) matrix masked along the prediction axis only, i.e. the mean over valid
    predictions j and *all* targets i (padding included) of (pred_j - target_i)^2.
    """
    pred = pred.reshape(-1)
    target = target.reshape(-1).to(pred.dtype)
    valid = valid.reshape(-1).bool()
    if official_broadcast:
        sq = (pred[None, :] - target[:, None]) ** 2  # [i, j] = (pred_j - target_i)^2
        return sq[:, valid].mean()
    return ((pred[valid] - target[valid]) ** 2).mean()


def inflection_weights(actions: torch.Tensor, valid: torch.Tensor, coefficient: float = 3.2) -> torch.Tensor:
    """(T, B) expert labels -> weights: ``coefficient`` at t = 0 and where the label changes, else 1; 0 on padding."""
    w = torch.ones_like(actions, dtype=torch.float32)
    change = torch.ones_like(actions, dtype=torch.bool)
    change[1:] = actions[1:] != actions[:-1]
    w[change] = coefficient
    return w * valid.float()


def action_loss(logits: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean over episodes of the weighted per-step cross entropy (SPEC §9.4); (T, B, 4) inputs."""
    ce = F.cross_entropy(logits.flatten(0, 1), actions.flatten().long(), reduction="none").view_as(weights)
    per_episode = (ce * weights).sum(0) / weights.sum(0).clamp(min=1e-9)
    return per_episode.mean()
