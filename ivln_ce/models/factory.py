"""Building policies and segmenters from the config, and writing checkpoints (SPEC §1.9).

``build_policy`` is the one place that turns ``policy.*`` (and the training switches of
``train.*``) into a model with its weights, so evaluation and training start from the same
thing. Loading order, later wins: GloVe (``policy.embeddings``), DD-PPO depth encoder
(``policy.ddppo_weights``), RGB trunk (``policy.rgb_weights``), then ``policy.checkpoint``
when it is a file (a folder of ``ckpt.{i}.pth`` files is the evaluator's to iterate, with
``load_checkpoint``). A checkpoint is either the toolkit's container (``config`` is a plain
dict) or an official one (``config`` is the pickled habitat configuration, read as an
``OfficialConfig``); both are read with the allow-listed loader and loaded strictly.

``save_checkpoint`` writes the toolkit's container (SPEC §1.9.1) atomically; trainers and
tests use it so every checkpoint has the same keys.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ivln_ce.config import MappingConfig, PolicyConfig, SemanticSource, TrainConfig, as_dataclass, is_random_init
from ivln_ce.models.cma import CMAPolicy
from ivln_ce.models.encoders import load_glove
from ivln_ce.models.map_cma import MapCMAPolicy
from ivln_ce.models.official_weights import (
    LoadReport,
    OfficialConfig,
    load_ddppo_depth_encoder,
    load_rednet,
    load_rgb_trunk,
    load_state,
    read_checkpoint,
)
from ivln_ce.models.rednet import RedNet, RedNetSegmenter

log = logging.getLogger(__name__)

#: ``policy.name`` -> CMA-family variant (``None``: MAP-CMA)
VARIANTS = {"cma": "cma", "tour_cma": "tourcma", "pool_cma": "poolcma", "pool_end_cma": "poolendcma", "map_cma": None}
#: the training counters of the checkpoint container (SPEC §1.9.1)
COUNTERS = ("dagger_it", "epoch", "step_id")


def _name(value: Any) -> str:
    return str(getattr(value, "value", value))


def _existing(path: str, key: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{key}: {p}: no such file")
    return p


def build_policy(policy_cfg: PolicyConfig, vocab_size: int, train_cfg: TrainConfig | None = None,
                 device: str | torch.device = "cpu", seed: int | None = None) -> tuple[CMAPolicy, list[LoadReport]]:
    """The policy named by ``policy.name`` with its weights loaded, and one report per file.

    With ``seed`` the random initialisation is drawn from a generator seeded by it (the global
    RNG is left as it was), so an untrained policy is the same function in every run."""
    if seed is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            return build_policy(policy_cfg, vocab_size, train_cfg, device, None)
    pc = as_dataclass(policy_cfg)
    tc = as_dataclass(train_cfg) if train_cfg is not None else TrainConfig()
    name = _name(pc.name)
    if name not in VARIANTS:
        raise ValueError(f"policy.name: {name!r} is not a learned policy; choose one of {sorted(VARIANTS)}")
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    backbone = _name(pc.depth_backbone)
    embeddings = None
    if pc.embeddings:
        path = _existing(pc.embeddings, "policy.embeddings")
        embeddings = load_glove(path)
        if embeddings.shape[0] != vocab_size:
            raise ValueError(f"policy.embeddings: {path}: {embeddings.shape[0]} rows, but the vocabulary has {vocab_size} words")
    switches = dict(bn_train_mode=tc.bn_train_mode, pm_broadcast_bug=tc.pm_broadcast_bug)
    if VARIANTS[name] is None:
        if pc.rgb_weights:
            raise ValueError(f"policy.rgb_weights: {pc.rgb_weights}: map_cma has no RGB encoder; leave the key empty")
        policy: CMAPolicy = MapCMAPolicy(vocab_size, embeddings, backbone, **switches)
    else:
        policy = CMAPolicy(VARIANTS[name], vocab_size, embeddings, backbone, pc.rgb_depth,
                           reset_state_gru_per_episode=pc.reset_state_gru_per_episode, **switches)
    policy.sequence_forward = _name(tc.sequence_forward)
    if int(pc.frozen_encoder_seed) >= 0:
        _reseed_frozen_encoders(policy, int(pc.frozen_encoder_seed), int(pc.rgb_depth))
    mode = _name(pc.embedding_training)
    if mode != "auto":
        policy.net.instruction_encoder.embedding_layer.weight.requires_grad_(mode == "learn")
    reports: list[LoadReport] = []
    if pc.ddppo_weights:
        path = _existing(pc.ddppo_weights, "policy.ddppo_weights")
        if backbone != "resnet50":
            raise ValueError(f"policy.ddppo_weights: {path} fits the resnet50 depth backbone, not policy.depth_backbone={backbone}")
        reports.append(load_ddppo_depth_encoder(policy.net.depth_encoder, path))
    if pc.rgb_weights:
        reports.append(load_rgb_trunk(policy.net.rgb_encoder, _existing(pc.rgb_weights, "policy.rgb_weights")))
    if pc.checkpoint and not is_random_init(pc.checkpoint):
        path = Path(pc.checkpoint)
        if path.is_file():
            arch = {"depth_backbone": backbone, **({"rgb_depth": int(pc.rgb_depth)} if VARIANTS[name] is not None else {})}
            reports.append(load_checkpoint(policy, path, name, glove=embeddings, arch=arch))
        elif not path.is_dir():
            raise FileNotFoundError(f"policy.checkpoint: {path}: no such file or folder")
    return policy.to(device), reports


def _reseed_frozen_encoders(policy: CMAPolicy, seed: int, rgb_depth: int) -> None:
    """Draw the frozen encoders' initial weights (depth backbone, RGB trunk) from ``seed`` alone,
    whatever the run's seed; weights files loaded afterwards still win."""
    from ivln_ce.models.encoders import RGBEncoder

    net = policy.net
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        depth = net.depth_encoder.visual_encoder
        depth.load_state_dict(type(depth)().state_dict())
        if getattr(net, "rgb_encoder", None) is not None:
            net.rgb_encoder.cnn.load_state_dict(RGBEncoder(rgb_depth).cnn.state_dict())


def checkpoint_kind(ckpt: dict[str, Any]) -> str:
    """``toolkit`` (plain-dict config), ``official`` (pickled habitat config) or ``bare`` (none)."""
    config = ckpt.get("config")
    if isinstance(config, OfficialConfig):
        return "official"
    if isinstance(config, dict):
        return "toolkit"
    return "bare"


def check_checkpoint_file(path: str | Path) -> None:
    """Raise ``ValueError`` (``FileNotFoundError``) naming ``path`` unless it reads safely as a
    checkpoint container with a ``state_dict``: before environment workers start on it."""
    ckpt = read_checkpoint(path)
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        keys = sorted(map(str, ckpt))[:8] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(f"{path}: not a policy checkpoint (no 'state_dict' dict; found {keys})")


def load_checkpoint(policy: nn.Module, path: str | Path, policy_name: str | None = None, glove: torch.Tensor | None = None,
                    arch: dict[str, Any] | None = None) -> LoadReport:
    """Strictly load a policy checkpoint file (toolkit or official) into ``policy``.

    A toolkit checkpoint that records ``policy.name`` must match ``policy_name``, and the
    ``policy.*`` architecture keys it records must match ``arch`` (the policy was built from
    config, so a mismatch is named here rather than left to a wall of shape errors). When a
    GloVe table was loaded first, a different copy in the checkpoint wins (SPEC §1.9.6), with a
    warning."""
    ckpt = read_checkpoint(path)
    kind = checkpoint_kind(ckpt)
    if "state_dict" not in ckpt or not isinstance(ckpt["state_dict"], dict):
        raise ValueError(f"{path}: no 'state_dict' dict in the checkpoint (keys: {sorted(map(str, ckpt))[:8]})")
    if kind == "toolkit" and policy_name is not None:
        section = ckpt["config"].get("policy")
        saved = section.get("name") if isinstance(section, dict) else None
        if saved is not None and saved != policy_name:
            raise ValueError(f"{path}: the checkpoint holds a {saved!r} policy (config policy.name), not {policy_name!r}")
        for key, want in (arch or {}).items():
            have = section.get(key) if isinstance(section, dict) else None
            if have is not None and str(have) != str(want):
                raise ValueError(f"{path}: the checkpoint was trained with policy.{key}={have}, but the config says {want}; "
                                 f"evaluate it with the config it was trained with, or set policy.{key}={have}")
    report = load_state(policy, ckpt["state_dict"], f"{path} ({kind} checkpoint)", strict=True)
    if glove is not None:
        table = policy.net.instruction_encoder.embedding_layer.weight
        if table.shape == glove.shape and not torch.equal(table.detach().cpu(), glove):
            log.warning("%s: its embedding table differs from policy.embeddings; the checkpoint's copy is used", path)
    return report


def save_checkpoint(path: str | Path, policy: nn.Module, config_dict: dict, optim_state: dict | None = None, **counters: int) -> Path:
    """Write the toolkit's checkpoint container atomically: ``state_dict``, ``config`` (a plain,
    JSON-serialisable dict), ``optim_state`` and the counters ``dagger_it``, ``epoch``,
    ``step_id`` (0 when not given). Only data is pickled, so ``read_checkpoint`` loads it."""
    unknown = sorted(set(counters) - set(COUNTERS))
    if unknown:
        raise TypeError(f"save_checkpoint: unknown counter(s) {unknown}; the container has {list(COUNTERS)}")
    if not isinstance(config_dict, dict) or isinstance(config_dict, OfficialConfig):
        raise TypeError(f"save_checkpoint: config must be a plain dict (e.g. ivln_ce.config.resolved(cfg)), got {type(config_dict).__name__}")
    try:
        config_dict = json.loads(json.dumps(config_dict))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"save_checkpoint: config is not JSON-serialisable: {exc}") from exc
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = {"state_dict": policy.state_dict(), "config": config_dict, "optim_state": optim_state, **{c: int(counters.get(c, 0)) for c in COUNTERS}}
    atomic_torch_save(obj, path)
    return path


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` to a hidden temporary beside ``path`` (umask permissions), then rename;
    the temporary is removed on any failure, and a failed write (a full disk: torch reports it
    as a RuntimeError) is an ``OSError`` naming the file."""
    from ivln_ce.data.jsonio import make_temp_beside

    path = Path(path)
    fd, tmp = make_temp_beside(path)
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, (OSError, RuntimeError)):
            raise OSError(f"{path}: could not be written ({exc}); is the disk full?") from exc
        raise


def load_segmenter(mapping_cfg: MappingConfig, device: str | torch.device = "cpu") -> RedNetSegmenter | None:
    """RedNet semantics for ``mapping.semantics: rednet`` (``None`` for GT semantics), from
    ``mapping.rednet_checkpoint`` (official or ``train-rednet`` layout) at ``mapping.rednet_depth``.
    The load report is kept as ``segmenter.load_report``."""
    mc = as_dataclass(mapping_cfg)
    if _name(mc.semantics) != SemanticSource.rednet.value:
        return None
    path = _existing(mc.rednet_checkpoint, "mapping.rednet_checkpoint")
    model = RedNet(depth=mc.rednet_depth)
    try:
        report = load_rednet(model, path)
    except ValueError as exc:
        if "shape mismatch" in str(exc) or "missing" in str(exc):
            raise ValueError(f"{exc} (mapping.rednet_depth={mc.rednet_depth}: does it match the checkpoint's encoder?)") from exc
        raise
    segmenter = RedNetSegmenter(model, device)
    segmenter.load_report = report
    return segmenter
