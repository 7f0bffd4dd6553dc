"""The A2C / PPO update over a rollout's episodes (seed 000 Eq. 10, with a learned baseline).

``ValueHead`` is the critic: a linear layer on the policy's action-head input (the second GRU's
output, PoolEndCMA's pooled output). It lives beside the policy, not inside it, so the
policy's parameters, their names and the checkpoints ``ivln-ce eval`` reads stay exactly
those of the other trainers; the trainer keeps the head in its resume state.

``advantages`` turns the episodes' rewards and rollout-time values into advantages and value
targets (``rl.advantages``: each episode cut at its end, GAE(gamma, lambda), normalised over
the rollout). ``collate`` pads episodes into time-major columns, each replayed from its own
``h0`` with its own masks and previous actions, so the recomputed log-probabilities are the
rollout's own (up to batching round-off) before the first parameter change. ``losses``:

* policy gradient: A2C -mean(log pi(a_t|s_t) A_t); PPO -mean(min(rho_t A_t,
  clip(rho_t, 1 - eps, 1 + eps) A_t)) with rho_t = pi / pi_old;
* value loss: mean((V(s_t) - target_t)^2), weighted by ``value_coef``;
* entropy bonus: mean of the policy's entropy, weighted by ``entropy_coef`` (subtracted).

Means are over the valid steps of the *global* minibatch (``total_steps``), so data-parallel
ranks that sum their gradients compute the single-process update.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ivln_ce.config import RLConfig, as_dataclass
from ivln_ce.rl.advantages import gae, normalize
from ivln_ce.rl.rollout import EpisodeRollout

HIDDEN = 512


class ValueHead(nn.Module):
    """V(s) = w . features + b, orthogonally initialised, zero bias."""

    def __init__(self, hidden: int = HIDDEN):
        super().__init__()
        self.linear = nn.Linear(hidden, 1)
        nn.init.orthogonal_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features).squeeze(-1)


def advantages(episodes: list[EpisodeRollout], gamma: float, lam: float, normalise: bool,
               moments: tuple[float, float, float] | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(advantages, value targets) per episode. ``moments`` = (count, sum, sum of squares) of
    the raw advantages over every rank's episodes, for a normalisation shared by the ranks
    (None: this process's episodes are the whole rollout)."""
    advs, targets = [], []
    for e in episodes:
        done = np.zeros(e.length, dtype=bool)
        done[-1] = True
        a, t = gae(e.rewards, e.steps["values"].astype(np.float64), done, gamma, lam)
        advs.append(a)
        targets.append(t)
    if normalise and advs:
        if moments is None:
            flat = normalize(np.concatenate(advs))
        else:
            n, s, ss = moments
            mean = s / n
            std = np.sqrt(max(ss / n - mean * mean, 0.0))
            flat = (np.concatenate(advs) - mean) / (std + 1e-8)
        advs = np.split(flat, np.cumsum([len(a) for a in advs])[:-1])
    return advs, targets


def raw_moments(episodes: list[EpisodeRollout], gamma: float, lam: float) -> np.ndarray:
    """(count, sum, sum of squares) of this process's raw advantages (float64)."""
    a = np.concatenate(advantages(episodes, gamma, lam, False)[0]) if episodes else np.zeros(0)
    return np.array([len(a), a.sum(), (a * a).sum()], dtype=np.float64)


@dataclass
class RolloutBatch:
    """Episodes as padded time-major columns."""

    observations: dict[str, torch.Tensor]
    prev_actions: torch.Tensor  # (T, N) long
    agent_masks: torch.Tensor  # (T, N) 1 keep / 0 reset, as the rollout saw them
    tour_masks: torch.Tensor
    h0: torch.Tensor  # (N, layers, hidden)
    actions: torch.Tensor  # (T, N) long
    old_logp: torch.Tensor  # (T, N)
    advantages: torch.Tensor  # (T, N)
    targets: torch.Tensor  # (T, N)
    valid: torch.Tensor  # (T, N) bool

    def to(self, device) -> "RolloutBatch":
        return RolloutBatch({k: v.to(device) for k, v in self.observations.items()},
                            *(getattr(self, f).to(device) for f in ("prev_actions", "agent_masks", "tour_masks", "h0", "actions",
                                                                   "old_logp", "advantages", "targets", "valid")))


def _pad(arrays: list[np.ndarray], T: int, dtype=None, fill: float = 0) -> torch.Tensor:
    first = np.asarray(arrays[0])
    out = np.full((T, len(arrays), *first.shape[1:]), fill, dtype=dtype or first.dtype)
    for n, a in enumerate(arrays):
        out[: len(a), n] = a
    return torch.from_numpy(out)


def collate(episodes: list[EpisodeRollout], advs: list[np.ndarray], targets: list[np.ndarray]) -> RolloutBatch:
    T = max(e.length for e in episodes)
    L = max(len(e.instruction) for e in episodes)
    instr = np.zeros((1, len(episodes), L), dtype=np.int64)
    for n, e in enumerate(episodes):
        instr[0, n, : len(e.instruction)] = e.instruction
    obs = {"instruction": torch.from_numpy(instr)}
    for key in ("depth_features", "rgb_features", "occupancy_map", "semantic_map"):
        if key in episodes[0].steps:
            obs[key] = _pad([e.steps[key] for e in episodes], T)
    valid = np.zeros((T, len(episodes)), dtype=bool)
    for n, e in enumerate(episodes):
        valid[: e.length, n] = True
    steps = lambda key, dtype=None, fill=0: _pad([e.steps[key] for e in episodes], T, dtype, fill)  # noqa: E731
    # padded steps keep their memory (masks 1): no loss reads them, and a reset there would split
    # the whole-sequence GRU calls at every padded step of the shorter episodes
    return RolloutBatch(
        obs, steps("prev_actions", np.int64), steps("agent_masks", np.float32, 1), steps("tour_masks", np.float32, 1),
        torch.stack([e.h0 for e in episodes]), steps("actions", np.int64), steps("logp", np.float32),
        _pad(advs, T, np.float32), _pad(targets, T, np.float32), torch.from_numpy(valid))


def losses(policy, value_head: ValueHead, batch: RolloutBatch, algorithm: str, clip: float, value_coef: float,
           entropy_coef: float, total_steps: int) -> dict[str, torch.Tensor]:
    """The loss of a minibatch (see the module docstring) and its parts for logging."""
    # padded steps (masks 1, previous action 0) produce outputs that no loss reads
    logits, _, _, features = policy.forward_sequence_features(batch.observations, batch.prev_actions, batch.agent_masks,
                                                              batch.tour_masks, batch.h0)
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    logp = logp_all.gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    values = value_head(features).float()
    v = batch.valid.float()
    n = float(max(total_steps, 1))
    adv = batch.advantages
    if algorithm == "ppo":
        ratio = torch.exp(logp - batch.old_logp)
        surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv)
        policy_loss = -(surrogate * v).sum() / n
        with torch.no_grad():
            clipped = ((ratio - 1.0).abs() > clip).float()
            clip_fraction = (clipped * v).sum() / n
    else:
        policy_loss = -(logp * adv * v).sum() / n
        clip_fraction = torch.zeros(())
    value_loss = (((values - batch.targets) ** 2) * v).sum() / n
    mean_entropy = (entropy * v).sum() / n
    loss = policy_loss + value_coef * value_loss - entropy_coef * mean_entropy
    with torch.no_grad():
        approx_kl = ((batch.old_logp - logp) * v).sum() / n
    return {"loss": loss, "policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(),
            "entropy": mean_entropy.detach(), "approx_kl": approx_kl, "clip_fraction": clip_fraction}


def minibatch_groups(keys: list[tuple[str, str]], seed: int, update: int, epoch: int, minibatches: int) -> dict[tuple[str, str], int]:
    """The minibatch of every episode of the update's rollout, keyed (tour id, episode id):
    a seeded permutation of ``keys`` (every episode the update's plan rolls out, in plan order:
    every rank knows them, whichever share it ran) cut into ``minibatches`` parts whose sizes
    differ by at most one, so every rank assigns each episode alike."""
    order = np.random.default_rng([int(seed), int(update), int(epoch), 31]).permutation(len(keys))
    out: dict[tuple[str, str], int] = {}
    for group, part in enumerate(np.array_split(order, max(1, int(minibatches)))):
        for i in part:
            out[keys[int(i)]] = group
    return out


#: the ``train.rl`` values the update reads: the config's own dataclass (one set of defaults)
UpdateSettings = RLConfig


def settings_from_config(rl) -> RLConfig:
    """``train.rl`` of a loaded config as the plain dataclass ``run_update`` takes."""
    return as_dataclass(rl)


SCALARS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


def run_update(policy, value_head: ValueHead, opt, params, episodes: list[EpisodeRollout], settings: UpdateSettings,
               seed: int, update: int, max_steps: int | None = None,
               keys: list[tuple[str, str]] | None = None) -> list[dict[str, float]]:
    """Optimizer steps on one rollout (this rank's ``episodes``); returns each step's scalars
    (global means). A2C makes one pass, PPO ``ppo_epochs``; each pass makes ``minibatches``
    steps (fewer when the rollout has fewer episodes). ``keys``: every episode of the rollout,
    every rank's, as (tour id, episode id) in plan order (default: ``episodes``' own, right for
    one process). Under torchrun every rank calls this with its own episodes: gradients are
    summed over ranks (each rank's loss is its share of the global mean), advantages normalised
    with the global moments, so N ranks take the single-process steps. ``max_steps`` caps the
    number of steps (``train.max_steps``)."""
    from ivln_ce.training import distributed as ddp

    _, world, _ = ddp.world()
    device = next(policy.parameters()).device
    moments = None
    if world > 1 and settings.normalize_advantages:
        moments = tuple(ddp.sum_over_ranks(torch.from_numpy(raw_moments(episodes, settings.gamma, settings.gae_lambda))).tolist())
    advs, targets = advantages(episodes, settings.gamma, settings.gae_lambda, settings.normalize_advantages, moments)
    passes = settings.ppo_epochs if settings.algorithm == "ppo" else 1
    policy.eval()  # BatchNorm statistics stay those of the rollout: the replayed log-probs are the rollout's
    out: list[dict[str, float]] = []
    for epoch in range(passes):
        where = minibatch_groups(keys if keys is not None else [(e.tour_id, e.episode_id) for e in episodes], seed, update, epoch,
                                 settings.minibatches)
        groups: list[list[int]] = [[] for _ in range(settings.minibatches)]
        for i, e in enumerate(episodes):
            if (e.tour_id, e.episode_id) not in where:
                raise ValueError(f"episode {e.episode_id} of tour {e.tour_id} is not among the rollout's planned episodes")
            groups[where[(e.tour_id, e.episode_id)]].append(i)
        for group in groups:
            if max_steps is not None and len(out) >= max_steps:
                return out
            count = torch.tensor([float(sum(episodes[i].length for i in group))], dtype=torch.float64)
            total = int(ddp.sum_over_ranks(count).item()) if world > 1 else int(count.item())
            if total == 0:
                continue  # an empty minibatch everywhere (few episodes, many minibatches): no step
            opt.zero_grad(set_to_none=True)
            parts = None
            if group:
                batch = collate([episodes[i] for i in group], [advs[i] for i in group], [targets[i] for i in group]).to(device)
                parts = losses(policy, value_head, batch, settings.algorithm, settings.ppo_clip, settings.value_coef,
                               settings.entropy_coef, total)
                (parts["loss"] * world).backward()  # the all-reduce averages: world x each share sums the shares
            if world > 1:
                ddp.allreduce_gradients(params)
            if settings.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, settings.max_grad_norm)
            opt.step()
            values = torch.tensor([float(parts[k].detach()) if parts is not None else 0.0 for k in SCALARS], dtype=torch.float64)
            if world > 1:
                values = ddp.sum_over_ranks(values)
            out.append(dict(zip(SCALARS, values.tolist())))
    return out
