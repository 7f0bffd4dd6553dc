"""MAP-CMA (SPEC §8.6): the CMA network with a semantic/occupancy map branch instead of RGB.

GRU1 input = [depth (128), map (256), previous action (32)] = 416; the second stage attends to
depth (keys 256 / values 128, ``dep_kv``) and to the map (keys 256 / values 256, ``map_kv``).
Both GRUs reset with the agent mask; memory across episodes lives in the map. The map
encoder's BatchNorm trains normally; its running statistics serve evaluation.
"""

from __future__ import annotations

import torch
from torch import nn

from ivln_ce.models.cma import CMANet, CMAPolicy, attend
from ivln_ce.models.encoders import MapEncoder, map_input


class MapCMANet(CMANet):
    def __init__(self, vocab_size: int = 2504, embeddings=None, depth_backbone: str = "resnet50"):
        super().__init__("cma", vocab_size, embeddings, depth_backbone)

    def _build_visual(self, rgb_depth: int, bn_train_mode: bool) -> None:
        self.map_encoder = MapEncoder()
        self.map_linear = nn.Sequential(nn.Flatten(), nn.Linear(128 * 16, 256), nn.ReLU(True))
        self.dep_kv = nn.Conv1d(192, 384, 1)
        self.map_kv = nn.Conv1d(128, 512, 1)
        self.visual_size = 256
        self.visual_att_size = 256

    def encode_visual(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        depth = self.depth_encoder(obs.get("depth"), obs.get("depth_features"))
        maps = obs["map"] if "map" in obs else map_input(obs["occupancy_map"], obs["semantic_map"])
        return {"depth": depth, "map": self.map_encoder(maps.float())}

    def _visual_in(self, v):
        # official order: [depth, map, previous action]
        return [self.depth_linear(v["depth"]), self.map_linear(v["map"])]

    def _visual_att(self, q2, v):
        dk, dv = self.dep_kv(v["depth"]).split([256, 128], dim=1)
        mk, mv = self.map_kv(v["map"]).split([256, 256], dim=1)
        return [attend(q2, dk, dv, None, self._scale), attend(q2, mk, mv, None, self._scale)]


class MapCMAPolicy(CMAPolicy):
    """MAP-CMA; ``bn_train_mode`` (T3) concerns its map encoder's BatchNorm during collection
    (``collection_mode``), ``pm_broadcast_bug`` (T1) its progress loss."""

    def __init__(self, vocab_size: int = 2504, embeddings=None, depth_backbone: str = "resnet50", *,
                 bn_train_mode: bool = False, pm_broadcast_bug: bool = False):
        nn.Module.__init__(self)
        self._init_policy(MapCMANet(vocab_size, embeddings, depth_backbone), bn_train_mode, pm_broadcast_bug)
