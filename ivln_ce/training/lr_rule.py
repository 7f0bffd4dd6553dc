"""The learning rate of every optimizer step: a batch-size rule and a linear warm-up.

A recipe tuned at one batch size (``train.lr_reference_batch``) is moved to another by
``train.lr_rule``: ``sqrt`` multiplies ``train.lr`` by sqrt(B / B_ref), ``linear`` by B / B_ref,
``fixed`` keeps it. ``train.lr_warmup_steps`` ramps the rate linearly from peak / W at the first
optimizer step to the peak at step W. The rate is a pure function of the step counter, so a
resumed run sets the rate the uninterrupted run would have."""

from __future__ import annotations

import math

from ivln_ce.config import ConfigError, LRRule


def peak_lr(lr: float, batch_size: int, reference_batch: int, rule: LRRule | str) -> float:
    """The rate after warm-up: ``lr`` scaled from ``reference_batch`` to ``batch_size``."""
    rule = LRRule(rule)
    if rule == LRRule.fixed:
        return float(lr)
    if reference_batch <= 0:
        raise ConfigError(f"train.lr_rule={rule.value} needs train.lr_reference_batch: the batch size train.lr was tuned at")
    ratio = batch_size / reference_batch
    return float(lr) * (math.sqrt(ratio) if rule == LRRule.sqrt else ratio)


def lr_at(step: int, peak: float, warmup_steps: int) -> float:
    """The rate of optimizer step ``step`` (1 for the first step of the run)."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return peak
    return peak * max(step, 1) / warmup_steps


def peak_of(tc) -> float:
    """The peak rate of a training config (``cfg.train``)."""
    return peak_lr(float(tc.lr), int(tc.batch_size), int(tc.lr_reference_batch), tc.lr_rule)


def set_lr(opt, tc, step: int) -> float:
    """Give every parameter group of ``opt`` the rate of optimizer step ``step``; returns it."""
    lr = lr_at(step, peak_of(tc), int(tc.lr_warmup_steps))
    for group in opt.param_groups:
        group["lr"] = lr
    return lr


def describe(tc) -> dict:
    """The rule as the run summary records it."""
    return {"rule": LRRule(tc.lr_rule).value, "base": float(tc.lr), "reference_batch": int(tc.lr_reference_batch),
            "batch_size": int(tc.batch_size), "peak": peak_of(tc), "warmup_steps": int(tc.lr_warmup_steps)}
