"""Loading the official checkpoints and weights by their key layouts (SPEC §1.9).

* Policy checkpoints (MAP-CMA, LatentCMA): a ``torch.save`` dict whose ``state_dict`` holds
  ``net.*`` and ``action_distribution.*``; its ``config`` is a pickled object of classes we
  do not have, so unpickling maps every unknown class to an inert stub.
* DD-PPO depth encoder (``gibson-2plus-resnet50.pth``): ``state_dict`` keys
  ``actor_critic.net.visual_encoder.{backbone,compression}.*`` -> strict load into the
  encoder's ``visual_encoder``.
* RedNet (``rednet_mp3d_best_model.pkl``): ``model_state``, optional ``module.`` prefixes,
  strict load (the deep-supervision heads are part of the file).

Every loader returns a ``LoadReport`` with the missing and unexpected keys.
"""

from __future__ import annotations

import pickle
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn


@dataclass
class LoadReport:
    source: str
    loaded: int
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected

    def __str__(self) -> str:
        text = f"{self.source}: {self.loaded} tensors loaded"
        if self.missing:
            text += f"; {len(self.missing)} missing (e.g. {self.missing[:5]})"
        if self.unexpected:
            text += f"; {len(self.unexpected)} unexpected (e.g. {self.unexpected[:5]})"
        return text


class _Stub:
    """Stands in for any class the checkpoint pickled but this environment lacks."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.state = state


class _StubUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if module.startswith(("torch", "collections", "numpy", "builtins", "_codecs", "copyreg")):
            return super().find_class(module, name)
        return type(name, (_Stub,), {"__module__": module})


_stub_pickle = types.SimpleNamespace(Unpickler=_StubUnpickler, load=pickle.load, __name__="ivln_stub_pickle")


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """``torch.load`` an official file, with unknown pickled classes replaced by stubs."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=False, pickle_module=_stub_pickle)
    except Exception as exc:
        raise ValueError(f"{path}: cannot read checkpoint: {exc}") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a dict at the top level, got {type(obj).__name__}")
    return obj


def _load(module: nn.Module, state: dict[str, torch.Tensor], source: str, strict: bool) -> LoadReport:
    own = module.state_dict()
    shape_errors = [f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}" for k, v in state.items() if k in own and own[k].shape != v.shape]
    if shape_errors:
        raise ValueError(f"{source}: shape mismatch for {len(shape_errors)} tensor(s): {shape_errors[:3]}")
    result = module.load_state_dict(state, strict=False)
    report = LoadReport(source, len(state) - len(result.unexpected_keys), list(result.missing_keys), list(result.unexpected_keys))
    if strict and not report.ok:
        raise ValueError(str(report))
    return report


def load_policy_checkpoint(policy: nn.Module, path: str | Path, strict: bool = True) -> LoadReport:
    """Load an official MAP-CMA or LatentCMA checkpoint (``state_dict`` key) into ``policy``."""
    ckpt = read_checkpoint(path)
    if "state_dict" not in ckpt:
        raise ValueError(f"{path}: no 'state_dict' in the checkpoint (keys: {sorted(ckpt)[:8]})")
    return _load(policy, ckpt["state_dict"], str(path), strict)


def ddppo_encoder_state(raw: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``actor_critic.net.visual_encoder.X`` -> ``X`` (other keys dropped)."""
    out = {}
    for k, v in raw.items():
        k = k[len("actor_critic.net."):] if k.startswith("actor_critic.net.") else k
        if k.startswith("visual_encoder."):
            out[k[len("visual_encoder."):]] = v
    return out


def load_ddppo_depth_encoder(encoder: nn.Module, path: str | Path) -> LoadReport:
    """Strictly load ``gibson-2plus-resnet50.pth`` into a ``DepthEncoder`` (its ``visual_encoder``)."""
    ckpt = read_checkpoint(path)
    state = ddppo_encoder_state(ckpt.get("state_dict", ckpt))
    if not state:
        raise ValueError(f"{path}: no 'actor_critic.net.visual_encoder.*' keys")
    target = getattr(encoder, "visual_encoder", encoder)
    return _load(target, state, str(path), strict=True)


def rednet_state(raw: dict[str, Any]) -> dict[str, torch.Tensor]:
    state = raw.get("model_state", raw)
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state.items()}


def load_rednet(model: nn.Module, path: str | Path) -> LoadReport:
    """Strictly load ``rednet_mp3d_best_model.pkl`` (``model_state``, optional ``module.``)."""
    return _load(model, rednet_state(read_checkpoint(path)), str(path), strict=True)
