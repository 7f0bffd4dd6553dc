"""Tour-sequential training of TourCMA, PoolCMA and PoolEndCMA (SPEC §9.6).

Each epoch the stored tours are packed into ``batch_size`` *lanes*; batch b holds the b-th
episode of every lane, and each lane's recurrent state is carried, detached, from one batch
to the next (truncated backpropagation at episode boundaries). The first episode of a tour
starts with tour mask 0, which resets the tour memory (TourCMA's GRUs, the PoolCMA memory M)
inside the model; the agent mask is 0 at every episode's t = 0, which resets the episodic
GRUs. CMA therefore starts every batch from zero, as officially.

Switches:

* ``train.official_lanes`` (T7, official true): tours in decreasing episode count, greedily
  packed into the lane with the smallest total (lowest lane on ties), the same lanes every
  epoch, and the official sampler's off-by-one: only batches 0 .. B - 2 of the B full ones.
  Off: tours shuffled into lanes every epoch, every episode used (short lanes just end).
* ``train.carry_padded_state`` (T2, official true): the carried state is the one after the
  batch's padded steps; off: the state at each episode's true last step.
* ``train.shuffle_within_tour``: episodes shuffled inside every tour each epoch (official).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ivln_ce.models.precision import autocast
from ivln_ce.training import distributed as ddp
from ivln_ce.training import lr_rule
from ivln_ce.training.batching import collate
from ivln_ce.training.errors import TrainError
from ivln_ce.training.step_log import log_step, step_scalars
from ivln_ce.training.store import TrajectoryStore
from ivln_ce.progress import bar as progress_bar

#: a lane entry: (store index, first episode of its tour)
Entry = tuple[int, bool]


def tours_of(store: TrajectoryStore, order: list[int]) -> dict[str, list[int]]:
    """tour id -> store indices in tour order, tours in their canonical (collection plan) order."""
    out: dict[str, list[tuple[int, int]]] = {}
    for i in order:
        m = store.meta(i)
        out.setdefault(m["tour_id"], []).append((int(m["position"]), i))
    return {t: [i for _, i in sorted(v)] for t, v in out.items()}


def pack_lanes(sizes: list[int], lanes: int, order: list[int]) -> list[list[int]]:
    """Greedy packing of tours (indices into ``sizes``, taken in ``order``) into ``lanes``:
    each tour goes to the lane with the smallest episode total (the lowest lane on ties)."""
    totals = [0] * lanes
    out: list[list[int]] = [[] for _ in range(lanes)]
    for t in order:
        w = min(range(lanes), key=lambda j: (totals[j], j))
        out[w].append(t)
        totals[w] += sizes[t]
    return out


def lane_batches(tours: dict[str, list[int]], batch_size: int, seed: int, round_: int, epoch: int,
                 official: bool, shuffle_within: bool) -> list[list[Entry | None]]:
    """The epoch's batches: one entry per lane (None where a lane has ended)."""
    ids = list(tours)
    sizes = [len(tours[t]) for t in ids]
    rng = np.random.default_rng([seed, round_, epoch, 96])
    if official:
        order = sorted(range(len(ids)), key=lambda t: -sizes[t])  # stable: ties keep the map's order
    else:
        order = [int(t) for t in rng.permutation(len(ids))]
    packing = pack_lanes(sizes, batch_size, order)
    lanes: list[list[Entry]] = []
    for lane in packing:
        seq: list[Entry] = []
        for t in lane:
            eps = list(tours[ids[t]])
            if shuffle_within:
                eps = [eps[j] for j in np.random.default_rng([seed, round_, epoch, 97, t]).permutation(len(eps))]
            seq += [(i, n == 0) for n, i in enumerate(eps)]
        lanes.append(seq)
    if official:
        full = min(len(s) for s in lanes)
        count = max(full - 1, 0)  # the official sampler also drops the last full batch
    else:
        count = max(len(s) for s in lanes)
    return [[lane[b] if b < len(lane) else None for lane in lanes] for b in range(count)]


def _rank_lanes(batch_size: int, rank: int, world: int) -> range:
    n = batch_size // world
    return range(rank * n, (rank + 1) * n)


def train_tour_epoch(cfg, policy, opt, params, store: TrajectoryStore, order: list[int], state, k: int, e: int, writer,
                     rank: int, world: int, show_progress: bool, resume_point: Callable[[], None]) -> bool:
    """One epoch of tour-sequential training; returns True when ``train.max_steps`` stopped it.

    With mid-epoch resume points (``train.resume_every``) every lane's carried state goes into
    ``state.lane_states`` after each batch (gathered from all ranks), so a run resumed
    mid-epoch carries on from the states it had, as an uninterrupted run does."""
    tc = cfg.train
    tours = tours_of(store, order)
    batches = lane_batches(tours, int(tc.batch_size), int(cfg.seed), k, e, bool(tc.official_lanes), bool(tc.shuffle_within_tour))
    if not batches and tours:
        raise TrainError(f"tour-sequential epoch with no batch: {len(tours)} tour(s) packed into train.batch_size={tc.batch_size} lanes "
                         f"leave a lane with fewer than 2 episodes, and the official sampler (train.official_lanes=true) drops "
                         f"the last full batch; use a smaller train.batch_size, more tours, or train.official_lanes=false")
    device = next(policy.parameters()).device
    L = policy.num_recurrent_layers
    hidden = policy.net.state_encoder.rnn.hidden_size
    my_lanes = _rank_lanes(int(tc.batch_size), rank, world) if world > 1 else range(int(tc.batch_size))
    carried = {lane: torch.zeros(L, hidden, device=device) for lane in my_lanes}
    if state.batch and state.lane_states is not None:  # resumed mid-epoch
        for lane in my_lanes:
            carried[lane] = state.lane_states[lane].to(device)
    keep_states = bool(int(tc.resume_every))
    policy.train()
    bar = progress_bar(total=len(batches), initial=state.batch, desc=f"round {k} epoch {e + 1}/{tc.epochs} (tours)", unit="batch",
                       disable=not show_progress or rank != 0)
    t0, first = time.perf_counter(), state.batch
    for j in range(state.batch, len(batches)):
        entries = batches[j]
        present = [lane for lane in my_lanes if entries[lane] is not None]
        global_present = [x for x in entries if x is not None]
        episodes = [store[entries[lane][0]] for lane in present]
        opt.zero_grad(set_to_none=True)
        if episodes:
            # padded to the global batch's longest episode: under T2 the carried state is the one
            # after the padded steps, so every rank pads as one process does
            pad_to = max(store.steps(x[0]) for x in global_present)
            batch = collate(episodes, float(tc.inflection_weight), pad_to=pad_to).to(device)
            tour_masks = batch.masks.clone()
            tour_masks[0] = torch.tensor([0.0 if entries[lane][1] else 1.0 for lane in present], device=device)
            h0 = torch.stack([carried[lane] for lane in present])
            lengths = batch.lengths if not tc.carry_padded_state else None
            with autocast(tc.precision, device):
                logits, progress, h_out = policy.forward_sequence(batch.observations, batch.prev_actions, batch.masks, tour_masks,
                                                                  h0, lengths=lengths)
            logits, progress = logits.float(), progress.float()
            ce = F.cross_entropy(logits.flatten(0, 1), batch.expert.flatten(), reduction="none").view_as(batch.weights)
            per_episode = (ce * batch.weights).sum(0) / batch.weights.sum(0).clamp(min=1e-9)
            action = per_episode.sum() * world / len(global_present)
            losses = {"action_loss": action, "loss": action}
            if float(tc.progress_weight) > 0:
                v = batch.valid
                glob_valid = sum(store.steps(x[0]) for x in global_present)
                pm = ((progress[v] - batch.progress[v]) ** 2).sum() * world / max(glob_valid, 1)
                losses["progress_loss"] = pm
                losses["loss"] = action + float(tc.progress_weight) * pm
            with torch.no_grad():
                losses["correct"] = (logits.argmax(-1) == batch.expert)[batch.valid].sum().float()
                losses["valid"] = batch.valid.sum().float()
            losses["loss"].backward()
            for n, lane in enumerate(present):
                carried[lane] = h_out[n].detach()
        else:  # this rank has no lane left in this batch: the all-reduce gives it zeros where others have gradients
            losses = None
        ddp.allreduce_gradients(params)
        lr = lr_rule.set_lr(opt, tc, state.step + 1)
        opt.step()
        state.step += 1
        state.batch = j + 1
        scalars = step_scalars(losses, world, float(tc.progress_weight) > 0, device)  # a collective: every rank
        scalars["learning_rate"] = lr
        if writer is not None:
            log_step(writer, scalars, state.step, time.perf_counter() - t0, j + 1 - first)
        if keep_states:
            state.lane_states = ddp.gather_cat(torch.stack([carried[lane] for lane in my_lanes])).cpu()
        bar.update()
        resume_point()
        if tc.max_steps and state.step >= int(tc.max_steps):
            bar.close()
            return True
    bar.close()
    return False
