"""Encoders of the CMA family (SPEC §8.1, §8.6), in the official parameter layout.

* ``InstructionEncoder``: GloVe-50 embedding (frozen, as officially) or, without GloVe, a learned
  table (as officially: ``nn.Embedding`` trained with the policy) + bidirectional LSTM(50, 128);
  output (N, 256, L_max) with padded positions zero; sequences packed by effective length.
* ``DepthEncoder``: the DD-PPO GroupNorm ResNet-50 (``visual_encoder.backbone/compression``,
  always frozen unless ``trainable``) or a small CNN for CPU work; 128x4x4 features plus a
  learned 16x64 spatial embedding -> (N, 192, 16). Depth is fed unnormalised (no-hit = 0).
* ``RGBEncoder``: torchvision-layout ResNet-50 trunk as ``cnn.{0,1,4..7}`` (frozen, its
  BatchNorm kept in eval mode unless the official collection defect is reproduced), 4x4
  adaptive pooling and a 16x64 spatial embedding -> (N, 2112, 16). Input uint8 / 255.
* ``MapEncoder``: four CoBRA blocks (7x7 conv, BatchNorm, ReLU, 2x2 average pooling),
  14 -> 32 -> 64 -> 128 -> 128 channels: 14x64x64 -> (N, 128, 16).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ivln_ce.models.precision import fp32_region
from ivln_ce.models.resnet import DDPPOResNet, ResNet


def load_glove(path: str | Path) -> torch.Tensor:
    """The official ``embeddings.json.gz``: a JSON list of rows (vocab x 50) in vocabulary order."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        rows = json.load(fh)
    table = torch.tensor(rows, dtype=torch.float32)
    if table.ndim != 2:
        raise ValueError(f"{path}: expected a list of equal-length rows, got shape {tuple(table.shape)}")
    if torch.any(table[0] != 0):
        raise ValueError(f"{path}: row 0 (padding) must be all zeros")
    zero_rows = (table.abs().sum(dim=1) == 0).nonzero().flatten().tolist()
    if zero_rows != [0]:
        raise ValueError(f"{path}: rows {zero_rows[1:6]} are all zeros besides padding; effective lengths would be wrong")
    return table


class InstructionEncoder(nn.Module):
    def __init__(self, vocab_size: int = 2504, embedding_size: int = 50, hidden_size: int = 128, embeddings: torch.Tensor | None = None,
                 fine_tune: bool | None = None):
        """``fine_tune``: whether the table trains; ``None`` (the official rule) learns a random
        table and keeps a pretrained one frozen."""
        super().__init__()
        self.embedding_layer = nn.Embedding(vocab_size, embedding_size, padding_idx=0)
        if embeddings is not None:
            if tuple(embeddings.shape) != (vocab_size, embedding_size):
                raise ValueError(f"embedding table {tuple(embeddings.shape)} does not match vocab {vocab_size} x {embedding_size}")
            self.embedding_layer.weight.data.copy_(embeddings)
        self.embedding_layer.weight.requires_grad_(embeddings is None if fine_tune is None else bool(fine_tune))
        self.encoder_rnn = nn.LSTM(embedding_size, hidden_size, batch_first=True, bidirectional=True)
        self.output_size = 2 * hidden_size

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (N, L_pad) -> features (N, 256, L_max) and a valid mask (N, L_max)."""
        emb = self.embedding_layer(tokens.long())
        lengths = (emb.abs().sum(dim=2) != 0).sum(dim=1).clamp(min=1)  # official: non-zero embedding rows
        packed = pack_padded_sequence(emb.float(), lengths.cpu(), batch_first=True, enforce_sorted=False)
        with fp32_region(tokens.device):
            out, _ = self.encoder_rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True)
        mask = torch.arange(out.shape[1], device=tokens.device)[None] < lengths[:, None]
        return out.permute(0, 2, 1).contiguous(), mask


def spatial_features(embedding: nn.Embedding, n: int) -> torch.Tensor:
    """The official spatial features, (n, 64, 16): ``emb(arange(16)).view(1, -1, h, w)``.

    This *reshapes* the (16, 64) table, i.e. reads its memory as (64, 4 x 4); it is not a
    transpose. Official weights (``depth_linear``, the key/value projections) were trained on
    exactly this layout."""
    table = embedding(torch.arange(embedding.num_embeddings, device=embedding.weight.device))
    return table.reshape(1, embedding.embedding_dim, embedding.num_embeddings).expand(n, -1, -1)


class DDPPODepthEncoder(nn.Module):
    """``backbone`` + ``compression`` as in ``gibson-2plus-resnet50.pth``: (N,1,128,128) -> 128x4x4."""

    def __init__(self):
        super().__init__()
        self.backbone = DDPPOResNet()
        self.compression = nn.Sequential(nn.Conv2d(1024, 128, 3, padding=1, bias=False), nn.GroupNorm(1, 128), nn.ReLU(True))

    def forward(self, x):
        return self.compression(self.backbone(x))


class SmallDepthEncoder(nn.Module):
    """A CPU-friendly depth CNN with the same output: (N,1,128,128) -> 128x4x4."""

    def __init__(self):
        super().__init__()
        chans = [1, 16, 32, 64, 128]
        layers = []
        for a, b in zip(chans[:-1], chans[1:]):
            layers += [nn.Conv2d(a, b, 3, 2, 1), nn.GroupNorm(8, b), nn.ReLU(True)]
        self.cnn = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(4))

    def forward(self, x):
        return self.cnn(x)


class DepthEncoder(nn.Module):
    def __init__(self, backbone: str = "resnet50", trainable: bool = False):
        super().__init__()
        if backbone == "resnet50":
            self.visual_encoder = DDPPODepthEncoder()
        elif backbone == "small":
            self.visual_encoder = SmallDepthEncoder()
        else:
            raise ValueError(f"depth backbone must be resnet50 or small, got {backbone!r}")
        self.trainable = trainable
        self.visual_encoder.requires_grad_(trainable)
        self.spatial_embeddings = nn.Embedding(16, 64)
        self.output_shape = (192, 16)

    def features(self, depth: torch.Tensor) -> torch.Tensor:
        """(N, H, W, 1) normalised depth -> the frozen 128x4x4 features (what collection stores)."""
        x = depth.permute(0, 3, 1, 2).float()
        x = F.avg_pool2d(x, 2)
        if self.trainable:
            return self.visual_encoder(x)
        with torch.no_grad():
            return self.visual_encoder(x)

    def forward(self, depth: torch.Tensor | None = None, features: torch.Tensor | None = None) -> torch.Tensor:
        f = self.features(depth) if features is None else features
        n = f.shape[0]
        f = f.flatten(2)  # (N, 128, 16)
        return torch.cat([f, spatial_features(self.spatial_embeddings, n)], dim=1)  # (N, 192, 16)


class RGBEncoder(nn.Module):
    def __init__(self, depth: int = 50, bn_train_mode: bool = False):
        super().__init__()
        trunk = ResNet(depth)
        self.cnn = nn.Sequential(trunk.conv1, trunk.bn1, trunk.relu, trunk.maxpool, trunk.layer1, trunk.layer2, trunk.layer3, trunk.layer4)
        self.cnn.requires_grad_(False)
        self.bn_train_mode = bn_train_mode
        self.spatial_embeddings = nn.Embedding(16, 64)
        self.channels = trunk.channels[-1]
        self.output_shape = (self.channels + 64, 16)

    def train(self, mode: bool = True):
        super().train(mode)
        if not self.bn_train_mode:
            self.cnn.eval()  # frozen trunk: normalisation layers stay in eval mode (fixes T3)
        return self

    def features(self, rgb: torch.Tensor) -> torch.Tensor:
        x = rgb.permute(0, 3, 1, 2).float() / 255.0
        with torch.no_grad():
            return F.adaptive_avg_pool2d(self.cnn(x), 4)

    def forward(self, rgb: torch.Tensor | None = None, features: torch.Tensor | None = None) -> torch.Tensor:
        f = self.features(rgb) if features is None else features
        n = f.shape[0]
        f = f.flatten(2)
        return torch.cat([f, spatial_features(self.spatial_embeddings, n)], dim=1)  # (N, 2112, 16)


class CoBRABlock(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(cin, cout, 7, padding=3), nn.BatchNorm2d(cout), nn.ReLU(True), nn.AvgPool2d(2))

    def forward(self, x):
        return self.conv(x)


class MapEncoder(nn.Module):
    #: run the convolutions on channels-last inputs (``train.channels_last``): cuDNN then picks
    #: its NHWC kernels, faster on tensor-core GPUs; the same function, equal within rounding
    channels_last: bool = False

    def __init__(self, in_channels: int = 14, base: int = 32):
        super().__init__()
        chans = [in_channels, base, base * 2, base * 4, base * 4]
        self.cnn = nn.Sequential(*[CoBRABlock(a, b) for a, b in zip(chans[:-1], chans[1:])])

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        """(N, 14, 64, 64) -> (N, 128, 16)."""
        if self.channels_last:
            maps = maps.contiguous(memory_format=torch.channels_last)
        return self.cnn(maps).flatten(2)


def use_channels_last(module: nn.Module, on: bool) -> None:
    """Switch every map encoder inside ``module`` (MAP-CMA's) to channels-last inputs."""
    for m in module.modules():
        if isinstance(m, MapEncoder):
            m.channels_last = on


def map_input(occupancy: torch.Tensor, semantic: torch.Tensor, num_classes: int = 13) -> torch.Tensor:
    """(N, 64, 64) occupancy and class maps -> the 14-channel input (occupancy, one-hot 0..12)."""
    onehot = F.one_hot(semantic.long(), num_classes).permute(0, 3, 1, 2).float()
    return torch.cat([occupancy.float()[:, None], onehot], dim=1)
