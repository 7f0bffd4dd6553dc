"""The instruction-trajectory compatibility model of seed 002 (§4.1, §4.3): a dual encoder and its losses.

* Instruction encoder: token embedding + bidirectional LSTM (``models.encoders.InstructionEncoder``);
  h^w is the concatenation of the final forward and backward states.
* Trajectory encoder: a two-layer LSTM over viewpoints. At viewpoint t, dot-product attention
  from h^v_{t-1} over the V "panorama" views gives a_t; v_t = f([e_prev, e_next, a_t, g_t]) with
  e_next the view toward the next viewpoint, e_prev the view toward the previous one and g_t the
  path geometry (turn angle, step length, height change, progress); h^v = h^v_T. Each view is
  its frozen CNN features plus sin/cos of its absolute and relative heading (one elevation).
* Score: S = cos(h^w, h^v). Classification p = sigmoid(a S + b), contrastive logits S / tau,
  with a, b, tau learned.

Losses, for N pairs with M_i = 1 for unperturbed pairs:
  L = L_C(S) + beta / N * sum_i L_cls(S_ii)
  L_C(S) = 1 / sum_i M_i * sum_i M_i (L_r(S_i) + L_r(S^T_i)),  L_r(S_i) = -log softmax(S_i / tau)_i
  L_cls = focal loss (Lin et al. 2017): -(1 - p_t)^gamma log p_t, p_t = p for a compatible pair,
  1 - p for an incompatible one (gamma = 0 is binary cross entropy).
``exclude`` (optional, N x N) removes off-diagonal entries that are matches too (a paraphrase of
the same path, the same path under another instruction) from the softmax denominators; the seed
does not need it because its R2R batches rarely hold one path twice.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ivln_ce.fidelity.compat_checks import check_float, check_int
from ivln_ce.models.encoders import InstructionEncoder

#: per view: sin/cos of the absolute heading, sin/cos of the heading relative to the travel direction
ORIENTATION_DIM = 4
#: per viewpoint: sin/cos of the turn, step length (m), height change (m), progress t / (T - 1)
GEOMETRY_DIM = 5
#: bounds of a model config (it may come from a file): the parameter count caps the memory
MAX_VOCAB = 1_000_000
MAX_WIDTH = 8192
MAX_VIEWS = 16
MAX_PARAMETERS = 50_000_000


@dataclass(frozen=True)
class CompatModelConfig:
    vocab_size: int
    feature_dim: int  # frozen CNN features per view
    views: int  # panorama views per viewpoint (e_prev is one more)
    embedding_size: int = 64
    hidden_size: int = 128  # per LSTM direction: h^w and h^v have 2 x hidden_size
    projection_size: int = 128  # a view's features after the learned projection
    dropout: float = 0.1

    def __post_init__(self) -> None:
        """Types and ranges of every field, and the parameter count, before a tensor is made:
        the config may come from a file (``compat.pt``), and a huge size would be allocated."""
        for name, hi in (("vocab_size", MAX_VOCAB), ("feature_dim", MAX_WIDTH), ("views", MAX_VIEWS),
                         ("embedding_size", MAX_WIDTH), ("hidden_size", MAX_WIDTH), ("projection_size", MAX_WIDTH)):
            check_int(name, getattr(self, name), 2 if name == "vocab_size" else 1, hi)
        check_float("dropout", self.dropout, 0.0, 0.99)
        if self.parameter_count() > MAX_PARAMETERS:
            raise ValueError(f"hidden_size {self.hidden_size}, embedding_size {self.embedding_size}, projection_size "
                             f"{self.projection_size}, vocab_size {self.vocab_size}, feature_dim {self.feature_dim}: "
                             f"{self.parameter_count():,} parameters, more than the {MAX_PARAMETERS:,} this model may have")

    def parameter_count(self) -> int:
        """The number of parameters of ``CompatibilityModel(self)``, computed without building it."""
        v, f, e, h, p = self.vocab_size, self.feature_dim, self.embedding_size, self.hidden_size, self.projection_size
        d = 2 * h
        instruction = v * e + 2 * (4 * h * (e + h) + 8 * h)
        views = 2 * (f + ORIENTATION_DIM) + (f + ORIENTATION_DIM) * p + p
        steps = d * p + (3 * p + GEOMETRY_DIM) * d + d + 2 * (8 * d * d + 8 * d)
        return instruction + views + steps + 3

    def to_dict(self) -> dict:
        return asdict(self)


class CompatibilityModel(nn.Module):
    def __init__(self, cfg: CompatModelConfig):
        super().__init__()
        self.cfg = cfg
        d = 2 * cfg.hidden_size
        self.instruction_encoder = InstructionEncoder(cfg.vocab_size, cfg.embedding_size, cfg.hidden_size, fine_tune=True)
        # the frozen features' scale is arbitrary (random trunks): normalise each view first
        self.view_projection = nn.Sequential(nn.LayerNorm(cfg.feature_dim + ORIENTATION_DIM),
                                             nn.Linear(cfg.feature_dim + ORIENTATION_DIM, cfg.projection_size), nn.ReLU())
        self.attention_query = nn.Linear(d, cfg.projection_size, bias=False)
        self.f = nn.Sequential(nn.Linear(3 * cfg.projection_size + GEOMETRY_DIM, d), nn.ReLU())
        self.lstm1 = nn.LSTMCell(d, d)
        self.lstm2 = nn.LSTMCell(d, d)
        self.dropout = nn.Dropout(cfg.dropout)
        # p = sigmoid(a S + b); logits S / tau = S * exp(log_inv_tau)
        self.a = nn.Parameter(torch.tensor(5.0))
        self.b = nn.Parameter(torch.tensor(0.0))
        self.log_inv_tau = nn.Parameter(torch.tensor(math.log(10.0)))

    def encode_instructions(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, L) token ids (0 = padding) -> h^w (N, 2 hidden)."""
        out, mask = self.instruction_encoder(tokens)  # (N, 2H, L), (N, L)
        h = self.cfg.hidden_size
        last = mask.sum(dim=1) - 1
        forward = out[torch.arange(out.shape[0]), :h, last]
        backward = out[:, h:, 0]
        return self.dropout(torch.cat([forward, backward], dim=1))

    def encode_trajectories(self, views: torch.Tensor, orientation: torch.Tensor, geometry: torch.Tensor,
                            lengths: torch.Tensor) -> torch.Tensor:
        """views (N, T, V+1, D) frozen features (index V: toward the previous viewpoint),
        orientation (N, T, V+1, 4), geometry (N, T, 5), lengths (N,) valid viewpoints -> h^v (N, 2 hidden)."""
        n, t_max, v1, _ = views.shape
        e = self.view_projection(torch.cat([views.float(), orientation.float()], dim=3))  # (N, T, V+1, P)
        e = self.dropout(e)
        d = 2 * self.cfg.hidden_size
        h1 = c1 = h2 = c2 = e.new_zeros(n, d)
        final = e.new_zeros(n, d)
        for t in range(t_max):
            pano = e[:, t, : v1 - 1]  # (N, V, P)
            q = self.attention_query(h2)  # (N, P)
            weights = torch.softmax(torch.einsum("nvp,np->nv", pano, q), dim=1)
            a_t = torch.einsum("nv,nvp->np", weights, pano)
            v_t = self.f(torch.cat([e[:, t, v1 - 1], e[:, t, 0], a_t, geometry[:, t].float()], dim=1))
            h1, c1 = self.lstm1(v_t, (h1, c1))
            h2, c2 = self.lstm2(self.dropout(h1), (h2, c2))
            final = torch.where((lengths - 1 == t)[:, None], h2, final)
        return final

    def similarity(self, hw: torch.Tensor, hv: torch.Tensor) -> torch.Tensor:
        """S (N_w, N_v): cosine similarity of every instruction with every trajectory."""
        return F.normalize(hw, dim=1) @ F.normalize(hv, dim=1).T

    def inv_tau(self) -> torch.Tensor:
        return self.log_inv_tau.clamp(max=math.log(100.0)).exp()

    def probability(self, s: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.a * s + self.b)


def contrastive_loss(s: torch.Tensor, matched: torch.Tensor, inv_tau: torch.Tensor | float,
                     exclude: torch.Tensor | None = None) -> torch.Tensor:
    """L_C(S): row and column cross entropy at the diagonal over the unperturbed pairs
    (``matched``, N bools); 0 when there are none. ``exclude``: N x N bools, True entries
    (off-diagonal) are left out of the softmax denominators."""
    m = matched.bool()
    if not bool(m.any()):
        return s.sum() * 0.0
    logits = s * inv_tau
    if exclude is not None:
        off = exclude.bool() & ~torch.eye(s.shape[0], dtype=torch.bool, device=s.device)
        logits = logits.masked_fill(off, float("-inf"))
    idx = torch.arange(s.shape[0], device=s.device)
    rows = -torch.log_softmax(logits, dim=1)[idx, idx]
    cols = -torch.log_softmax(logits, dim=0)[idx, idx]
    return ((rows + cols) * m.float()).sum() / m.float().sum()


def focal_loss(logits: torch.Tensor, labels: torch.Tensor, gamma: float = 2.0) -> torch.Tensor:
    """Per-pair focal loss of p = sigmoid(logits): -(1 - p_t)^gamma log p_t (not reduced)."""
    y = labels.float()
    log_p = F.logsigmoid(logits)
    log_q = F.logsigmoid(-logits)
    log_pt = y * log_p + (1 - y) * log_q
    return -((1 - log_pt.exp()) ** gamma) * log_pt


@dataclass
class LossParts:
    total: torch.Tensor
    contrastive: torch.Tensor
    classification: torch.Tensor


def compatibility_loss(s: torch.Tensor, matched: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                       inv_tau: torch.Tensor | float, gamma: float = 2.0, beta: float = 1.0,
                       exclude: torch.Tensor | None = None) -> LossParts:
    """L = L_C(S) + beta / N sum_i focal(S_ii) (seed 002, eq. 4-6)."""
    lc = contrastive_loss(s, matched, inv_tau, exclude)
    diag = torch.diagonal(s)
    cls = focal_loss(a * diag + b, matched, gamma).mean()
    return LossParts(lc + beta * cls, lc, cls)
