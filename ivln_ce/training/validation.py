"""Teacher-forced validation (``train.val_split``): after every epoch, the policy's action
accuracy and action loss on a held-out split's expert trajectories.

The trainer collects the split once with beta = 1 into ``OUT/val_store`` (its frozen encoders
are the policy's, so the store is the run's own); this module scores it. The score is what the
training step reports (inflection-weighted cross entropy averaged over episodes, accuracy over
valid steps) computed without gradients, BatchNorm in eval mode, so it does not depend on how
the episodes are batched or shared among ranks. ``train.val_ablations`` scores the same
trajectories again with the instructions removed (``none``) or cut (``last:K``): an agent
whose accuracy does not fall without its instruction does not read it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ivln_ce.data.language_ablation import InstructionAblation, last_tokens
from ivln_ce.data.vocab import PAD_INDEX
from ivln_ce.models.precision import autocast
from ivln_ce.training import distributed as ddp
from ivln_ce.training.batching import collate
from ivln_ce.training.store import TrajectoryStore

VAL_STORE = "val_store"


def validation_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Store indices in batches of similar lengths (longest first): little padding, no randomness."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[s:s + batch_size] for s in range(0, len(order), batch_size)]


def ablate_batch_instructions(instruction: torch.Tensor, ablation: InstructionAblation) -> torch.Tensor:
    """(1, B, L) token ids with ``ablation`` applied per episode: ``none`` (all padding) or
    ``last:K`` (the last K tokens, moved to the front), as ``eval.instruction`` does."""
    if ablation.mode == "full":
        return instruction
    if ablation.mode == "none":
        return torch.full_like(instruction, PAD_INDEX)
    if ablation.mode == "last":
        rows = [last_tokens(row, int(ablation.k)) for row in instruction[0].tolist()]
        return torch.tensor(rows, dtype=instruction.dtype, device=instruction.device)[None]
    raise ValueError(f"validation ablations are full, none and last:K, not {ablation}")


@torch.no_grad()
def score_store_ablations(policy, store: TrajectoryStore, batch_size: int, inflection: float, precision, rank: int = 0,
                          world: int = 1, ablations: tuple[str, ...] = ()) -> dict[str, dict]:
    """Accuracy and action loss of ``policy`` on every episode of ``store``, with the full
    instructions (key ``full``) and with each of ``ablations`` (``none``, ``last:K``), in one pass
    over the store: each batch is read and collated once. This rank scores its share of every
    batch; the sums cover all ranks."""
    device = next(policy.parameters()).device
    names = ["full", *[str(a) for a in ablations]]
    parsed = [InstructionAblation.parse(n) for n in names]
    was_training = policy.training
    policy.eval()
    # per name: loss sum over episodes, episodes, correct, valid
    sums = torch.zeros(len(names), 4, dtype=torch.float64, device=device)
    lengths = [store.steps(i) for i in range(len(store))]
    try:
        for batch_ids in validation_batches(lengths, batch_size):
            mine = batch_ids[rank::world]
            if not mine:
                continue
            batch = collate([store[i] for i in mine], inflection).to(device)
            for n, ablation in enumerate(parsed):
                obs = dict(batch.observations)
                obs["instruction"] = ablate_batch_instructions(obs["instruction"], ablation)
                with autocast(precision, device):
                    logits, _, _ = policy.forward_sequence(obs, batch.prev_actions, batch.masks, batch.masks)
                logits = logits.float()
                ce = F.cross_entropy(logits.flatten(0, 1), batch.expert.flatten(), reduction="none").view_as(batch.weights)
                per_episode = (ce * batch.weights).sum(0) / batch.weights.sum(0).clamp(min=1e-9)
                correct = (logits.argmax(-1) == batch.expert)[batch.valid].sum()
                sums[n] += torch.stack([per_episode.sum().double(), torch.tensor(float(len(mine)), dtype=torch.float64, device=device),
                                        correct.double(), batch.valid.sum().double()])
    finally:
        policy.train(was_training)
    if world > 1:
        sums = ddp.sum_over_ranks(sums)
    out = {}
    for name, (loss, episodes, correct, valid) in zip(names, sums.tolist()):
        out[name] = {"action_accuracy": correct / valid if valid else float("nan"),
                     "action_loss": loss / episodes if episodes else float("nan"), "episodes": int(episodes), "steps": int(valid)}
    return out


def score_store(policy, store: TrajectoryStore, batch_size: int, inflection: float, precision, rank: int = 0, world: int = 1,
                ablation: InstructionAblation | None = None) -> dict:
    """``score_store_ablations`` for one setting: the full instructions, or ``ablation``."""
    if ablation is None or not ablation.ablated:
        return score_store_ablations(policy, store, batch_size, inflection, precision, rank, world)["full"]
    return score_store_ablations(policy, store, batch_size, inflection, precision, rank, world, (str(ablation),))[str(ablation)]
