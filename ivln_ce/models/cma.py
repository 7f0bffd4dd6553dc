"""The CMA family (SPEC §8.2-8.5, §8.8): CMA, TourCMA, PoolCMA, PoolEndCMA.

One network class covers the four variants (``variant``), with the official parameter names
(``net.*`` and ``action_distribution.linear``) so official LatentCMA checkpoints load. The
visual inputs are pluggable so ``map_cma.MapCMAPolicy`` reuses everything but the RGB branch.

Recurrent state (N, L, 512): slot 0 = h1 (first GRU), slot 1 = h2 (second GRU), slot 2 = the
PoolCMA tour memory M. Which mask resets which slot (1 = keep, 0 = reset; official):

=========== ============== ============== ==========
model       h1             h2             M
=========== ============== ============== ==========
CMA         agent          agent          -
TourCMA     tour           tour (*)       -
PoolCMA     agent          agent          tour
PoolEndCMA  agent          agent          tour
MAP-CMA     agent          agent          -
=========== ============== ============== ==========

(*) ``reset_state_gru_per_episode=True`` gives the paper's TourCMA (h2 resets per episode).
The previous-action embedding index is (prev_action + 1) * agent_mask for every model.

Two entry points: ``act`` (batched, state keyed by stream id: reordering or pausing
environments changes nothing; the instruction is encoded once per episode; the caller records
the *executed* actions with ``PolicyState.record_actions``) runs ``CMANet.step``, and
``forward_sequence`` (T x N training input) runs ``CMANet.sequence``, every layer over the whole
sequence at once, or with ``mode="step"`` the same per-step function as ``act`` (the reference
the whole-sequence path is tested against, within 1e-5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ivln_ce.models.encoders import DepthEncoder, InstructionEncoder, RGBEncoder
from ivln_ce.models.losses import progress_monitor_loss
from ivln_ce.models.precision import fp32_region

HIDDEN = 512
VARIANTS = ("cma", "tourcma", "poolcma", "poolendcma")
#: how training runs a (T, N) sequence: ``whole`` (every layer over T x N at once, the recurrent
#: layers as whole-sequence calls) or ``step`` (``CMANet.step`` T times: the reference, and what
#: ``act`` runs); ``train.sequence_forward`` selects it
SEQUENCE_FORWARDS = ("whole", "step")


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: torch.Tensor) -> torch.Tensor:
    """q (N, d), k (N, d, S), v (N, e, S), mask (N, S) True = valid -> (N, e)."""
    logits = torch.einsum("nd,nds->ns", q, k)
    if mask is not None:
        logits = logits.masked_fill(~mask, -1e8)
    w = torch.softmax(logits * scale, dim=1)
    return torch.einsum("ns,nes->ne", w, v)


class RNNStateEncoder(nn.Module):
    """A single-layer GRU (``rnn``) with orthogonal weights and zero biases, reset by masks.

    It runs in float32 under bf16 autocast too (``precision.fp32_region``)."""

    def __init__(self, input_size: int, hidden_size: int = HIDDEN):
        super().__init__()
        self.rnn = nn.GRU(input_size, hidden_size)
        for name, p in self.rnn.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, x: torch.Tensor, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """One step: x (N, in), h (N, H), mask (N,) 1 keep / 0 reset -> new h (N, H)."""
        h = h.float() * mask[:, None]
        with fp32_region(x.device):
            out, _ = self.rnn(x.float()[None], h[None].contiguous())
        return out[0]

    def sequence(self, x: torch.Tensor, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Every step of a sequence: x (T, N, in), h (N, H), mask (T, N) -> states (T, N, H).

        Equal to ``forward`` applied T times. The GRU runs once per segment between the steps
        where some column resets (mask 0): one call (cuDNN on CUDA) when only t = 0 resets, as
        in episodic and tour-sequential batches; a column that does not reset at a segment's
        start is multiplied by 1, which changes nothing."""
        T = x.shape[0]
        resets = torch.nonzero((mask[1:] == 0).any(dim=1)).flatten().add_(1).tolist()  # one host sync
        bounds = [0, *resets, T]
        h = h.float()
        x = x.float()
        outs = []
        with fp32_region(x.device):
            for s, e in zip(bounds[:-1], bounds[1:]):
                out, last = self.rnn(x[s:e], (h * mask[s][:, None])[None].contiguous())
                outs.append(out)
                h = last[0]
        return outs[0] if len(outs) == 1 else torch.cat(outs)


class CategoricalHead(nn.Module):
    def __init__(self, hidden: int = HIDDEN, actions: int = 4):
        super().__init__()
        self.linear = nn.Linear(hidden, actions)
        nn.init.orthogonal_(self.linear.weight, gain=0.01)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x):
        return self.linear(x)


@dataclass
class StepInputs:
    """One step for N streams (all tensors batched along dim 0)."""

    instruction: torch.Tensor  # (N, 256, L) encoded
    instruction_mask: torch.Tensor  # (N, L) True = valid token
    prev_actions: torch.Tensor  # (N,) long, -1 = none
    agent_mask: torch.Tensor  # (N,) float 1 keep / 0 reset
    tour_mask: torch.Tensor  # (N,)
    visual: dict[str, torch.Tensor]  # encoder features by name


class CMANet(nn.Module):
    """The latent CMA network; subclasses replace the visual branch (see MAP-CMA)."""

    def __init__(self, variant: str = "cma", vocab_size: int = 2504, embeddings=None, depth_backbone: str = "resnet50",
                 rgb_depth: int = 50, *, reset_state_gru_per_episode: bool = False, bn_train_mode: bool = False):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        self.variant = variant
        self.pool = variant in ("poolcma", "poolendcma")
        self.reset_state_gru_per_episode = reset_state_gru_per_episode
        self.instruction_encoder = InstructionEncoder(vocab_size, embeddings=embeddings)
        self.depth_encoder = DepthEncoder(depth_backbone)
        self.prev_action_embedding = nn.Embedding(5, 32)
        self.depth_linear = nn.Sequential(nn.Flatten(), nn.Linear(192 * 16, 128), nn.ReLU(True))
        self._build_visual(rgb_depth, bn_train_mode)
        gru1_in = self.visual_size + 128 + 32 + (HIDDEN if self.pool else 0)
        self.state_encoder = RNNStateEncoder(gru1_in)
        self.state_q = nn.Linear(HIDDEN, 256)
        self.text_k = nn.Conv1d(256, 256, 1)
        self.text_q = nn.Linear(256, 256)
        self.register_buffer("_scale", torch.tensor(1.0 / math.sqrt(HIDDEN // 2)))
        self.second_state_compress = nn.Sequential(nn.Linear(HIDDEN + 256 + self.visual_att_size + 128 + 32, HIDDEN), nn.ReLU(True))
        self.second_state_encoder = RNNStateEncoder(HIDDEN)
        if variant == "poolendcma":
            self.out_layer = nn.Sequential(nn.Linear(2 * HIDDEN, HIDDEN), nn.ReLU(True))
        self.progress_monitor = nn.Linear(HIDDEN, 1)
        nn.init.kaiming_normal_(self.progress_monitor.weight, nonlinearity="tanh")
        nn.init.zeros_(self.progress_monitor.bias)
        self.num_recurrent_layers = 3 if self.pool else 2

    # --- visual branch (RGB for the latent family) ---------------------------------
    def _build_visual(self, rgb_depth: int, bn_train_mode: bool) -> None:
        self.rgb_encoder = RGBEncoder(rgb_depth, bn_train_mode)
        c = self.rgb_encoder.output_shape[0]
        self.rgb_linear = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(c, 256), nn.ReLU(True))
        self.rgb_kv = nn.Conv1d(c, 512, 1)
        self.depth_kv = nn.Conv1d(192, 384, 1)
        self.visual_size = 256
        self.visual_att_size = 256

    def encode_visual(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        depth = self.depth_encoder(obs.get("depth"), obs.get("depth_features"))
        rgb = self.rgb_encoder(obs.get("rgb"), obs.get("rgb_features"))
        return {"depth": depth, "rgb": rgb}

    def _visual_in(self, v: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return [self.rgb_linear(v["rgb"]), self.depth_linear(v["depth"])]

    def _visual_att(self, q2: torch.Tensor, v: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        rk, rv = self.rgb_kv(v["rgb"]).split([256, 256], dim=1)
        dk, dv = self.depth_kv(v["depth"]).split([256, 128], dim=1)
        return [attend(q2, rk, rv, None, self._scale), attend(q2, dk, dv, None, self._scale)]

    # --- one step ---------------------------------------------------------------------
    def step(self, x: StepInputs, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> (features for the action head (N, 512), progress (N,), new state (N, L, 512))."""
        am, tm = x.agent_mask.float(), x.tour_mask.float()
        prev = self.prev_action_embedding(((x.prev_actions.long() + 1) * am.long()).clamp(min=0))
        parts = self._visual_in(x.visual) + [prev]
        new = h.clone()
        if self.pool:
            m = h[:, 2] * tm[:, None]
            parts.append(m)
        mask1 = tm if self.variant == "tourcma" else am
        mask2 = am if (self.variant != "tourcma" or self.reset_state_gru_per_episode) else tm
        h1 = self.state_encoder(torch.cat(parts, dim=1), h[:, 0], mask1)
        text = attend(self.state_q(h1), self.text_k(x.instruction), x.instruction, x.instruction_mask, self._scale)
        q2 = self.text_q(text)
        feats = torch.cat([h1, text, *self._visual_att(q2, x.visual), prev], dim=1)
        h2 = self.second_state_encoder(self.second_state_compress(feats), h[:, 1], mask2)
        new[:, 0], new[:, 1] = h1, h2
        out = h2
        if self.pool:
            with torch.no_grad():
                new[:, 2] = torch.maximum(m, h1)
            if self.variant == "poolendcma":
                out = self.out_layer(torch.cat([h2, m], dim=1))
        progress = torch.tanh(self.progress_monitor(h2)).squeeze(1)
        return out, progress, new

    # --- a whole sequence ------------------------------------------------------------
    def sequence(self, instruction: torch.Tensor, instruction_mask: torch.Tensor, prev_actions: torch.Tensor,
                 agent_masks: torch.Tensor, tour_masks: torch.Tensor, visual: dict[str, torch.Tensor],
                 h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``step`` over T steps at once: inputs (T, N, ...), ``visual`` (T, N, ...) features,
        ``h0`` (N, L, 512) -> features for the action head (T, N, 512), progress (T, N) and the
        state after every step (T, N, L, 512).

        Everything but the recurrences runs over T x N in one call; each GRU runs over the
        whole sequence (``RNNStateEncoder.sequence``). PoolCMA's first GRU reads the tour
        memory M, the running maximum of its own past outputs, so for the pool variants that
        GRU alone steps in a loop (a few operations per step); the rest is batched."""
        T, N = prev_actions.shape
        am, tm = agent_masks.float(), tour_masks.float()
        prev = self.prev_action_embedding(((prev_actions.long() + 1) * am.long()).clamp(min=0))  # (T, N, 32)
        flat = {k: v.flatten(0, 1) for k, v in visual.items()}
        parts = [p.view(T, N, -1) for p in self._visual_in(flat)] + [prev]
        mask1 = tm if self.variant == "tourcma" else am
        mask2 = am if (self.variant != "tourcma" or self.reset_state_gru_per_episode) else tm
        if self.pool:
            h1, memory_in, memory = self._pooled_first_gru(torch.cat(parts, dim=2), h0, mask1, tm)
        else:
            h1 = self.state_encoder.sequence(torch.cat(parts, dim=2), h0[:, 0], mask1)
        q = self.state_q(h1)  # (T, N, 256)
        k = self.text_k(instruction)  # (N, 256, S)
        logits = torch.einsum("tnd,nds->tns", q, k).masked_fill(~instruction_mask[None], -1e8)
        text = torch.einsum("tns,nes->tne", torch.softmax(logits * self._scale, dim=2), instruction)
        q2 = self.text_q(text)
        att = [a.view(T, N, -1) for a in self._visual_att(q2.flatten(0, 1), flat)]
        feats = torch.cat([h1, text, *att, prev], dim=2)
        h2 = self.second_state_encoder.sequence(self.second_state_compress(feats), h0[:, 1], mask2)
        out = h2
        states = [h1, h2]
        if self.pool:
            states.append(memory)
            if self.variant == "poolendcma":
                out = self.out_layer(torch.cat([h2, memory_in], dim=2))
        progress = torch.tanh(self.progress_monitor(h2)).squeeze(2)
        return out, progress, torch.stack([s.float() for s in states], dim=2)

    def _pooled_first_gru(self, x: torch.Tensor, h0: torch.Tensor, mask1: torch.Tensor, tm: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """PoolCMA's first GRU, step by step: its input at t is [x_t, M_{t-1} * tour mask]; M_t =
        max(that, h1_t) without gradient, as in ``step``. -> h1, the M read at each step, the M
        after each step (each (T, N, 512))."""
        h, memory = h0[:, 0], h0[:, 2]
        h1s, ins, outs = [], [], []
        for t in range(x.shape[0]):
            m = memory * tm[t][:, None]
            h = self.state_encoder(torch.cat([x[t], m], dim=1), h, mask1[t])
            with torch.no_grad():
                memory = torch.maximum(m, h)
            h1s.append(h)
            ins.append(m)
            outs.append(memory)
        return torch.stack(h1s), torch.stack(ins), torch.stack(outs)


@dataclass
class PolicyState:
    """Per-stream memory: recurrent state, the encoded instruction, the previous action.

    ``prev_action`` holds the action the environment *executed* at a stream's previous step,
    recorded by the caller through ``record_actions``: under DAgger (beta < 1) or on oracle
    steps it is not the policy's choice, and the official previous-action input is the
    executed one (SPEC §1.10)."""

    hidden: dict[str, torch.Tensor] = field(default_factory=dict)  # (L, 512)
    #: stream -> (features (C, W), mask (W), length): zero beyond the length
    instruction: dict[str, tuple[torch.Tensor, torch.Tensor, int]] = field(default_factory=dict)
    prev_action: dict[str, int] = field(default_factory=dict)
    encodings: int = 0  # instruction encodings performed (once per episode per stream)

    def record_actions(self, stream_ids: Sequence[str], executed_actions) -> None:
        """Remember the actions the environments executed for these streams (one per id)."""
        actions = executed_actions.tolist() if isinstance(executed_actions, torch.Tensor) else list(executed_actions)
        if len(actions) != len(stream_ids):
            raise ValueError(f"record_actions: {len(stream_ids)} stream ids but {len(actions)} actions")
        for s, a in zip(stream_ids, actions):
            a = int(a)
            if not 0 <= a <= 3:
                raise ValueError(f"record_actions: stream {s!r}: action {a} is not one of 0..3")
            self.prev_action[s] = a

    def drop(self, stream_id: str) -> None:
        """Forget a finished or paused stream."""
        self.hidden.pop(stream_id, None)
        self.instruction.pop(stream_id, None)
        self.prev_action.pop(stream_id, None)


class CMAPolicy(nn.Module):
    """A CMA-family policy: ``net`` + ``action_distribution`` (official key layout).

    Training switches the policy carries (set from ``train.*`` by ``models.factory``):
    ``bn_train_mode`` (T3: collect in train mode, see ``collection_mode``),
    ``pm_broadcast_bug`` (T1: used by ``progress_loss``) and ``sequence_forward`` (whole or
    step, see ``forward_sequence_features``)."""

    def __init__(self, variant: str = "cma", vocab_size: int = 2504, embeddings=None, depth_backbone: str = "resnet50",
                 rgb_depth: int = 50, *, reset_state_gru_per_episode: bool = False, bn_train_mode: bool = False,
                 pm_broadcast_bug: bool = False):
        super().__init__()
        net = CMANet(variant, vocab_size, embeddings, depth_backbone, rgb_depth,
                     reset_state_gru_per_episode=reset_state_gru_per_episode, bn_train_mode=bn_train_mode)
        self._init_policy(net, bn_train_mode, pm_broadcast_bug)

    def _init_policy(self, net: nn.Module, bn_train_mode: bool, pm_broadcast_bug: bool) -> None:
        self.net = net
        self.action_distribution = CategoricalHead()
        self.bn_train_mode = bn_train_mode
        self.pm_broadcast_bug = pm_broadcast_bug
        self.sequence_forward = "whole"

    def collection_mode(self) -> "CMAPolicy":
        """The mode for collecting rollouts: train mode when T3 is reproduced (BatchNorm uses
        the active workers' batch statistics and updates its running ones), else eval."""
        return self.train(self.bn_train_mode)

    def progress_loss(self, pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """The progress-monitor loss, with defect T1 when ``pm_broadcast_bug``."""
        return progress_monitor_loss(pred, target, valid, official_broadcast=self.pm_broadcast_bug)

    @property
    def num_recurrent_layers(self) -> int:
        return self.net.num_recurrent_layers

    @staticmethod
    def _pad_instructions(encoded: Sequence[tuple[torch.Tensor, torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's encoded instructions, zero-padded to its longest (``L``): (N, C, L), (N, L).

        Each stream's encoding is stored zeroed beyond its length at a common width, so the
        batch is one stack and a slice (a constant number of operators, whatever N); the values
        equal those of padding each stream's trimmed encoding."""
        L = max(n for _, _, n in encoded)
        if len({f.shape[1] for f, _, _ in encoded}) == 1:
            feats = torch.stack([f for f, _, _ in encoded])[:, :, :L].contiguous()
            masks = torch.stack([m for _, m, _ in encoded])[:, :L].contiguous()
            return feats, masks
        feats = torch.stack([F.pad(f[:, :n], (0, L - n)) for f, _, n in encoded])
        masks = torch.stack([F.pad(m[:n], (0, L - n)) for _, m, n in encoded])
        return feats, masks

    @torch.no_grad()
    def act(
        self,
        observations: dict[str, torch.Tensor],
        state: PolicyState,
        stream_ids: Sequence[str],
        episode_start: torch.Tensor,
        tour_start: torch.Tensor,
        deterministic: bool = True,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, PolicyState]:
        """Actions (N,) and progress (N,) for a batch of streams; ``state`` is updated in place.

        ``episode_start`` (agent mask 0: first observation of an episode and every oracle
        step) and ``tour_start`` (tour mask 0) are the environment's memory signals. The
        previous-action input is what ``state.record_actions`` last stored for each stream;
        ``act`` does not record its own choice (the executed action may differ).
        """
        L = self.num_recurrent_layers
        device = next(self.parameters()).device
        fresh = None  # one zero state shared by the batch's new streams (stack copies it)
        hs = []
        for s in stream_ids:
            if s not in state.hidden and fresh is None:
                fresh = torch.zeros(L, HIDDEN, device=device)
            hs.append(state.hidden.get(s, fresh))
        h = torch.stack(hs)
        starts = episode_start.tolist()  # one transfer, not one per stream
        need = [i for i, s in enumerate(stream_ids) if starts[i] or s not in state.instruction]
        if need:
            feats, mask = self.net.instruction_encoder(observations["instruction"][need])
            lengths = [int(n) for n in mask.sum(1).tolist()]
            # zeroed beyond each length, at the input's width: the batch stacks without padding
            keep = torch.arange(feats.shape[2], device=feats.device)[None, :] < torch.tensor(lengths, device=feats.device)[:, None]
            width = max(int(observations["instruction"].shape[1]), feats.shape[2])
            feats = F.pad(torch.where(keep[:, None, :], feats, torch.zeros((), dtype=feats.dtype, device=feats.device)),
                          (0, width - feats.shape[2]))
            mask = F.pad(torch.where(keep, mask, torch.zeros((), dtype=mask.dtype, device=mask.device)), (0, width - mask.shape[1]))
            for j, i in enumerate(need):
                state.instruction[stream_ids[i]] = (feats[j], mask[j], lengths[j])
            state.encodings += len(need)
        instr, instr_mask = self._pad_instructions([state.instruction[s] for s in stream_ids])
        prev = torch.tensor([state.prev_action.get(s, -1) for s in stream_ids], device=device)
        x = StepInputs(instr, instr_mask, prev, (~episode_start.bool()).float(), (~tour_start.bool()).float(), self.net.encode_visual(observations))
        out, progress, new_h = self.net.step(x, h)
        logits = self.action_distribution(out)
        self.last_logits = logits.detach()  # for callers that sample per stream with their own generators
        self.last_features = out.detach()  # the action head's input (a critic's input: ``ivln_ce.rl``)
        if deterministic:
            actions = logits.argmax(dim=1)
        else:
            actions = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=generator).squeeze(1)
        for s, row in zip(stream_ids, new_h.detach().unbind(0)):
            state.hidden[s] = row
        return actions, progress, state

    def forward_sequence(
        self,
        observations: dict[str, torch.Tensor],
        prev_actions: torch.Tensor,
        agent_masks: torch.Tensor,
        tour_masks: torch.Tensor,
        h0: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        mode: str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Training forward over (T, N, ...) inputs -> logits (T, N, 4), progress (T, N), h.

        The instruction is encoded once per sequence (from t = 0); ``prev_actions`` holds the
        action executed before each step (-1 where there is none). ``h`` is the state after the
        last step, or with ``lengths`` (N,) the state after each column's step ``lengths - 1``
        (its true last step; tour-sequential training carries that one unless T2 is reproduced).
        """
        logits, progress, h, _ = self.forward_sequence_features(observations, prev_actions, agent_masks, tour_masks, h0, lengths, mode)
        return logits, progress, h

    def forward_sequence_features(
        self,
        observations: dict[str, torch.Tensor],
        prev_actions: torch.Tensor,
        agent_masks: torch.Tensor,
        tour_masks: torch.Tensor,
        h0: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        mode: str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``forward_sequence`` plus the action head's input features (T, N, 512): what a
        value head reads (``ivln_ce.rl``).

        ``mode`` (default: the policy's ``sequence_forward``, set from ``train.sequence_forward``)
        is ``whole`` (``CMANet.sequence``: dispatched operators that do not grow with T) or ``step`` (the
        per-step loop of ``act``, the reference the whole-sequence path is tested against)."""
        mode = mode or self.sequence_forward
        if mode not in SEQUENCE_FORWARDS:
            raise ValueError(f"sequence forward must be one of {SEQUENCE_FORWARDS}, got {mode!r}")
        T, N = prev_actions.shape
        instr, instr_mask = self.net.instruction_encoder(observations["instruction"][0])
        visual = self.net.encode_visual({k: v.flatten(0, 1) for k, v in observations.items() if k != "instruction"})
        visual = {k: v.view(T, N, *v.shape[1:]) for k, v in visual.items()}
        h = h0 if h0 is not None else torch.zeros(N, self.num_recurrent_layers, HIDDEN, device=prev_actions.device)
        if mode == "whole":
            out, progress, states = self.net.sequence(instr, instr_mask, prev_actions, agent_masks, tour_masks, visual, h)
            if lengths is None:
                last = states[-1]
            else:
                lengths = lengths.to(states.device).long()
                last = states[(lengths - 1).clamp(min=0), torch.arange(N, device=states.device)]
                last = torch.where((lengths > 0)[:, None, None], last, h)  # a column without steps keeps h0, as in the loop
            return self.action_distribution(out), progress, last, out
        logits, progress, features = [], [], []
        last = h
        for t in range(T):
            x = StepInputs(instr, instr_mask, prev_actions[t], agent_masks[t].float(), tour_masks[t].float(), {k: v[t] for k, v in visual.items()})
            out, p, h = self.net.step(x, h)
            logits.append(self.action_distribution(out))
            progress.append(p)
            features.append(out)
            if lengths is not None:
                ends = (lengths.to(h.device) - 1 == t)[:, None, None]
                last = torch.where(ends, h, last)
        return torch.stack(logits), torch.stack(progress), (last if lengths is not None else h), torch.stack(features)


def make_latent_policy(variant: str = "cma", **kwargs) -> CMAPolicy:
    return CMAPolicy(variant, **kwargs)
