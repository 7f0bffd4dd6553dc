"""Reading checkpoints safely, and loading the official ones by their key layouts (SPEC §1.9).

Every checkpoint (official or the toolkit's) is read by ``read_checkpoint``: ``torch.load``
with ``weights_only=True`` and an explicit allow-list, so a file can only ever produce data.
Unpickling arbitrary globals would let a checkpoint run code on load (``os.system``,
``builtins.exec``, ...); such files are refused with an error naming the file and the global.

The allow-list is torch's own (tensors, storages, ``OrderedDict``, ``set``, ...), numpy scalars
and dtypes (older files store counters as numpy scalars), and the classes of the official
pickled configuration (a habitat ``Config``, i.e. a yacs ``CfgNode``: a ``dict`` subclass).
Those are never imported: each is mapped to a data-only factory, and the result becomes an
``OfficialConfig`` (a plain ``dict`` subclass with the pickled attributes kept as data).

Files are scanned before loading (``get_unsafe_globals_in_checkpoint``, and a static opcode
scan for pickle protocols 4-5, which torch's weights-only unpickler cannot read), so the error
lists every refused global at once.

Why a factory rather than the stand-in class itself: a dict subclass is pickled as NEWOBJ
(class) + SETITEMS (its items) + BUILD (its ``__dict__``), and torch's weights-only unpickler
accepts SETITEMS only on objects whose type is exactly ``dict``/``OrderedDict``/``Counter``.
So NEWOBJ of an allowed config class returns a marked ``OrderedDict`` (items and BUILD state
both work on it), and the marked dicts are turned into ``OfficialConfig`` after loading.

Official layouts:

* Policy checkpoints (MAP-CMA, LatentCMA): ``state_dict`` holds ``net.*`` and
  ``action_distribution.*``; ``config`` is the pickled configuration.
* DD-PPO depth encoder (``gibson-2plus-resnet50.pth``): ``state_dict`` keys
  ``actor_critic.net.visual_encoder.{backbone,compression}.*`` -> strict load into the
  encoder's ``visual_encoder``.
* RedNet (``rednet_mp3d_best_model.pkl``): ``model_state``, optional ``module.`` prefixes,
  strict load (the deep-supervision heads are part of the file).

Every loader returns a ``LoadReport`` with the missing and unexpected keys.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import re
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from torch import nn

#: fully qualified names of the official configuration classes (habitat-lab 0.1.x ``Config``,
#: its yacs base); they are replaced by data-only stand-ins, never imported
CONFIG_CLASSES = ("habitat.config.default.Config", "yacs.config.CfgNode")

_MARK = "__ivln_ce_pickled_class__"


class UnsafeCheckpointError(ValueError):
    """A checkpoint references a global outside the allow-list; it was not loaded."""


class OfficialConfig(dict):
    """Data-only stand-in for a pickled configuration node: its items, plus ``pickled_class``
    (the original class name) and ``state`` (its pickled ``__dict__``, e.g. yacs flags).
    Keys read as attributes (``cfg.MODEL.policy_name``), as on the original; nothing else."""

    def __init__(self, items=(), pickled_class: str = "", state: dict | None = None):
        super().__init__(items)
        object.__setattr__(self, "pickled_class", pickled_class)
        object.__setattr__(self, "state", dict(state or {}))

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{self.pickled_class or 'config'} has no key {name!r}") from None

    def __setattr__(self, name, value):
        raise AttributeError("OfficialConfig is read-only data")

    def to_dict(self) -> dict:
        """Plain nested dicts (for printing or JSON)."""
        return {k: (v.to_dict() if isinstance(v, OfficialConfig) else v) for k, v in self.items()}


def _config_factory(name: str) -> type:
    """A class whose ``__new__`` returns an ``OrderedDict`` marked with ``name``: the only kind
    of object on which torch's weights-only unpickler applies both SETITEMS and BUILD."""

    def __new__(cls, *args, **kwargs):  # arguments of a pickled NEWOBJ/REDUCE are ignored
        node = OrderedDict()
        node.__dict__[_MARK] = name
        return node

    return type("ConfigStandIn", (), {"__new__": __new__, "__module__": __name__, "__qualname__": f"ConfigStandIn[{name}]"})


def _numpy_globals() -> list[tuple[Any, str]]:
    """numpy scalars as pickled by numpy 1.x and 2.x: ``scalar(dtype, bytes)`` and ``dtype(...)``."""
    core = getattr(np, "_core", None) or np.core
    scalar = core.multiarray.scalar
    out = [(scalar, "numpy.core.multiarray.scalar"), (scalar, "numpy._core.multiarray.scalar"), (np.dtype, "numpy.dtype")]
    # a dtype's BUILD (its pickled state) is applied only to allow-listed types: the concrete
    # dtype classes (numpy >= 1.25) of the plain numeric, bool and string dtypes
    for cls in {type(np.dtype(c)) for c in "?bBhHiIlLqQefdgFDGUS"} - {np.dtype}:
        out.append((cls, f"numpy.dtypes.{cls.__name__}"))
    return out


def allowed_globals(config_classes: Iterable[str] = CONFIG_CLASSES) -> list[tuple[Any, str]]:
    """The explicit allow-list added to torch's own for ``weights_only`` loading."""
    return [(_config_factory(name), name) for name in config_classes] + _numpy_globals()


def _convert(obj: Any) -> Any:
    """Marked ``OrderedDict``s (official config nodes) -> ``OfficialConfig``, recursively."""
    if isinstance(obj, OrderedDict) and _MARK in obj.__dict__:
        state = {k: _convert(v) for k, v in obj.__dict__.items() if k != _MARK}
        return OfficialConfig(((k, _convert(v)) for k, v in obj.items()), obj.__dict__[_MARK], state)
    if isinstance(obj, OrderedDict):
        for k, v in obj.items():
            if isinstance(v, (dict, list, tuple)):
                obj[k] = _convert(v)
        return obj
    if isinstance(obj, dict):
        return {k: _convert(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_convert(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_convert(v) for v in obj)
    return obj


_GLOBAL_IN_MESSAGE = re.compile(r"GLOBAL (\S+)")


def _pickle_head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of the pickle data: ``data.pkl`` of a zip checkpoint, else the file."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            names = [n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if not names:
                return b""
            with zf.open(names[0]) as fh:
                return fh.read(size)
    with open(path, "rb") as fh:
        return fh.read(size)


def _pickle_globals(data: bytes, pickles: int = 4) -> set[str]:
    """Globals named by GLOBAL and STACK_GLOBAL opcodes in the first ``pickles`` pickles of
    ``data`` (a legacy torch file is several in a row; the object is the fourth). A static
    scan: nothing is executed."""
    found, stream = set(), io.BytesIO(data)
    for _ in range(pickles):
        strings = []
        try:
            for op, arg, _ in pickletools.genops(stream):
                if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
                    strings.append(arg)
                elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    found.add(f"{strings[-2]}.{strings[-1]}")
                elif op.name == "GLOBAL":
                    found.add(arg.replace(" ", "."))
        except Exception:  # the end of the pickles, or an odd stream: the load itself reports it
            break
    return found


def _check_protocol(path: Path, safe: list[tuple[Any, str]], note: str) -> None:
    """Pickle protocols 4 and 5 (STACK_GLOBAL, FRAME) are beyond torch's weights-only
    unpickler; refuse them up front, naming what they reference."""
    head = _pickle_head(path, 2)
    proto = head[1] if head[:1] == b"\x80" and len(head) > 1 else 2
    if proto < 4:
        return
    data = _pickle_head(path, 64 << 20)  # the object pickles come first; storages follow
    allowed = {name for _, name in safe} | set(_torch_allowed_names())
    refused = sorted(g for g in _pickle_globals(data) if g not in allowed)
    if refused:
        raise UnsafeCheckpointError(f"{path}: refused global(s) {refused} ({note})")
    raise ValueError(f"{path}: pickle protocol {proto} cannot be read by the safe (weights-only) loader; "
                     "re-save it with torch.save's default protocol 2")


def _torch_allowed_names() -> list[str]:
    getter = getattr(getattr(torch, "_weights_only_unpickler", None), "_get_allowed_globals", None)
    return list(getter()) if getter else []


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu", config_classes: Iterable[str] = CONFIG_CLASSES) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` a checkpoint with the module's allow-list.

    Raises ``UnsafeCheckpointError`` (naming the file and the refused globals) when the file
    references anything else; nothing from the file is executed. Official configuration
    objects come back as ``OfficialConfig``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    safe = allowed_globals(config_classes)
    allowed_note = ("allowed: tensors and containers, numpy scalars, and the official config classes "
                    f"{list(config_classes)}; loading it could execute code, so it was not loaded")
    _check_protocol(path, safe, allowed_note)
    with torch.serialization.safe_globals(safe):
        if zipfile.is_zipfile(path):  # the torch.save format since torch 1.6: scan all globals first
            try:
                refused = sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
            except Exception as exc:
                raise ValueError(f"{path}: cannot read checkpoint: {exc}") from exc
            if refused:
                raise UnsafeCheckpointError(f"{path}: refused global(s) {refused} ({allowed_note})")
        try:
            obj = torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as exc:
            found = _GLOBAL_IN_MESSAGE.search(str(exc))
            name = found.group(1) if found else ""
            name = name if "." in name or not name else f"builtins.{name}"  # torch drops the builtins prefix
            what = f"refused global {name!r}" if found else f"refused content ({exc})"
            raise UnsafeCheckpointError(f"{path}: {what} ({allowed_note})") from None
        except Exception as exc:
            raise ValueError(f"{path}: cannot read checkpoint: {exc}") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a dict at the top level, got {type(obj).__name__}")
    return _convert(obj)


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


def load_state(module: nn.Module, state: dict[str, torch.Tensor], source: str, strict: bool) -> LoadReport:
    """Load ``state`` into ``module``; shape mismatches always raise, missing/unexpected keys
    raise when ``strict`` (the message names ``source``)."""
    own = module.state_dict()
    bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ValueError(f"{source}: entries that are not tensors: {bad[:5]}")
    shape_errors = [f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}" for k, v in state.items() if k in own and own[k].shape != v.shape]
    if shape_errors:
        raise ValueError(f"{source}: shape mismatch for {len(shape_errors)} tensor(s): {shape_errors[:3]}")
    result = module.load_state_dict(state, strict=False)
    report = LoadReport(source, len(state) - len(result.unexpected_keys), list(result.missing_keys), list(result.unexpected_keys))
    if strict and not report.ok:
        raise ValueError(str(report))
    return report


def _state_dict_of(ckpt: dict[str, Any], path: str | Path, key: str = "state_dict") -> dict[str, torch.Tensor]:
    if key not in ckpt:
        raise ValueError(f"{path}: no {key!r} in the checkpoint (keys: {sorted(map(str, ckpt))[:8]})")
    state = ckpt[key]
    if not isinstance(state, dict):
        raise ValueError(f"{path}: {key!r} is a {type(state).__name__}, expected a dict of tensors")
    return state


def load_policy_checkpoint(policy: nn.Module, path: str | Path, strict: bool = True) -> LoadReport:
    """Load an official MAP-CMA or LatentCMA checkpoint (``state_dict`` key) into ``policy``."""
    return load_state(policy, _state_dict_of(read_checkpoint(path), path), str(path), strict)


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
    state = ddppo_encoder_state(ckpt["state_dict"] if "state_dict" in ckpt else ckpt)
    if not state:
        raise ValueError(f"{path}: no 'actor_critic.net.visual_encoder.*' keys")
    target = getattr(encoder, "visual_encoder", encoder)
    return load_state(target, state, str(path), strict=True)


def torchvision_trunk_state(raw: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A torchvision ResNet state dict (``conv1``, ``bn1``, ``layer1-4``, ``fc``) -> the RGB
    encoder's ``cnn.{0,1,4,5,6,7}`` layout (SPEC §1.9.3); ``fc`` is dropped."""
    index = {"conv1": "0", "bn1": "1", "layer1": "4", "layer2": "5", "layer3": "6", "layer4": "7"}
    out = {}
    for k, v in raw.items():
        head, _, rest = k.partition(".")
        if head in index:
            out[f"{index[head]}.{rest}"] = v
    return out


def load_rgb_trunk(rgb_encoder: nn.Module, path: str | Path) -> LoadReport:
    """Strictly load ImageNet ResNet weights (a torchvision state dict, optionally under
    ``state_dict``) into ``RGBEncoder.cnn``."""
    ckpt = read_checkpoint(path)
    raw = ckpt["state_dict"] if isinstance(ckpt.get("state_dict"), dict) else ckpt
    state = torchvision_trunk_state(raw)
    if not state:
        raise ValueError(f"{path}: no torchvision ResNet keys (conv1.*, bn1.*, layer1-4.*)")
    return load_state(rgb_encoder.cnn, state, str(path), strict=True)


def rednet_state(raw: dict[str, Any]) -> dict[str, torch.Tensor]:
    state = raw["model_state"] if "model_state" in raw else raw
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state.items()}


def load_rednet(model: nn.Module, path: str | Path) -> LoadReport:
    """Strictly load ``rednet_mp3d_best_model.pkl`` (``model_state``, optional ``module.``)."""
    return load_state(model, rednet_state(read_checkpoint(path)), str(path), strict=True)
