"""Returns and advantages of a rollout (seed 000 Eq. 10: A_t = R_t - b_t), numpy, float64.

Arrays are time-major, (T,) or (T, N) for N independent streams. ``dones[t]`` is True where
step t is the last action of an episode: nothing flows back across it, so a return never
crosses an episode end. In iterative (tour) mode a stream's agent steps run through several
episodes; the recurrent memory persists across them (the policy's business), the return
does not. Oracle steps between episodes are not actions of the agent and never appear here.

* ``discounted_returns``: R_t = r_t + gamma (1 - done_t) R_{t+1}, with R_T = ``bootstrap``
  (the value of the state after the last step, for a stream cut before its episode ended;
  ignored where the last step is an episode end).
* ``gae``: generalised advantage estimation, delta_t = r_t + gamma (1 - done_t) V_{t+1} - V_t,
  A_t = delta_t + gamma lambda (1 - done_t) A_{t+1}; the value targets are A_t + V_t. With
  lambda = 1 the advantage is exactly R_t - V_t (the seed's), with lambda = 0 the one-step
  TD error.
* ``normalize``: (A - mean) / (std + eps) over the valid entries (``valid`` masks padding).
"""

from __future__ import annotations

import numpy as np


def _as_arrays(rewards, dones, bootstrap):
    r = np.asarray(rewards, dtype=np.float64)
    d = np.asarray(dones, dtype=bool)
    if r.shape != d.shape or r.ndim not in (1, 2):
        raise ValueError(f"rewards {r.shape} and dones {d.shape} must have the same (T,) or (T, N) shape")
    b = np.broadcast_to(np.asarray(bootstrap, dtype=np.float64), r.shape[1:])
    return r, d, b


def discounted_returns(rewards, dones, gamma: float, bootstrap=0.0) -> np.ndarray:
    """R_t of every step (see the module docstring)."""
    r, d, b = _as_arrays(rewards, dones, bootstrap)
    out = np.empty_like(r)
    running = np.array(b, dtype=np.float64)
    for t in range(len(r) - 1, -1, -1):
        running = r[t] + gamma * np.where(d[t], 0.0, running)
        out[t] = running
    return out


def gae(rewards, values, dones, gamma: float, lam: float, bootstrap=0.0) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, value targets) by GAE(gamma, lambda)."""
    r, d, b = _as_arrays(rewards, dones, bootstrap)
    v = np.asarray(values, dtype=np.float64)
    if v.shape != r.shape:
        raise ValueError(f"values {v.shape} and rewards {r.shape} differ in shape")
    adv = np.empty_like(r)
    next_value = np.array(b, dtype=np.float64)
    running = np.zeros(r.shape[1:])
    for t in range(len(r) - 1, -1, -1):
        keep = np.where(d[t], 0.0, 1.0)
        delta = r[t] + gamma * keep * next_value - v[t]
        running = delta + gamma * lam * keep * running
        adv[t] = running
        next_value = v[t]
    return adv, adv + v


def normalize(advantages, valid=None, eps: float = 1e-8) -> np.ndarray:
    """Zero mean, unit standard deviation over the valid entries (others are left as 0)."""
    a = np.asarray(advantages, dtype=np.float64)
    m = np.ones(a.shape, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    out = np.zeros_like(a)
    if not m.any():
        return out
    x = a[m]
    out[m] = (x - x.mean()) / (x.std() + eps)
    return out
