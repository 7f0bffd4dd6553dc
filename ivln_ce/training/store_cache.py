"""Teacher-forcing stores collected once and reused by every run with the same inputs.

What a teacher-forcing round stores (beta = 1: the expert drives, the policy only encodes) is a
function of the data (episodes, tours, references, scenes), the simulator and environment
settings, the map settings, the frozen encoders' weights (they make the stored features) and
the store's own format, not of the seed, the batch size or the learning rate. ``train.store_cache``
names a folder where such stores are kept under a fingerprint of exactly those inputs
(``collection_fingerprint``); a run whose inputs match copies the store instead of collecting it.

A cached entry is checked, never trusted by its name: its manifest must carry the same
fingerprint, list exactly the files present (plain files, no links, names without folders),
each with its size and SHA-256, and the copied store must open with the manifest's episode and
step counts and pass the store's own CRC checks. An entry that fails is not used (the round is
collected and the entry replaced); one of other inputs simply has another name. Entries are
written to a hidden folder and renamed into place, so a reader never sees half of one.

The frozen encoders of the embedded recipes start from a seeded random initialisation; with
``policy.frozen_encoder_seed`` fixed, runs of different seeds share them, as runs that load
pretrained encoders (the paper's) do, and so share one collection.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from ivln_ce import fingerprint as fpr
from ivln_ce.config import resolved
from ivln_ce.training.store import StoreError, TrajectoryStore

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT = "ivln_ce.store_cache/1"
#: config keys that decide what a teacher-forcing round stores (besides data files, scenes,
#: the frozen encoders' weights and the code)
COLLECTION_KEYS = ("simulator", "env", "mapping", "data.split", "policy.name", "policy.depth_backbone", "policy.rgb_depth",
                   "train.split", "train.use_tours", "train.tours", "train.update_size", "train.store_fp16", "train.store_codec",
                   "train.store_observations", "train.deferred_encoding", "train.fp16_token_bug", "train.bn_train_mode", "train.itmaps_ft_on_tours",
                   "train.trainer")  # tour-sequential training keeps the tours' order in its plan
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_FP = re.compile(r"^[0-9a-f]{64}$")


class StoreCacheError(ValueError):
    """The cache folder itself cannot be used (not a folder, a link)."""


def _tensor_digest(module: torch.nn.Module | None) -> str | None:
    """SHA-256 over a module's state (names, dtypes, shapes, bytes): its weights and buffers."""
    if module is None:
        return None
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes())
    return h.hexdigest()


def frozen_encoder_digests(policy) -> dict[str, str | None]:
    """The weights that make stored features: the depth backbone and the RGB trunk."""
    net = policy.net
    depth = getattr(getattr(net, "depth_encoder", None), "visual_encoder", None)
    rgb = getattr(getattr(net, "rgb_encoder", None), "cnn", None)
    return {"depth": _tensor_digest(depth), "rgb": _tensor_digest(rgb)}


def _pick(tree: dict, dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def collection_fingerprint(cfg, files: dict[str, str], scenes: Any, policy, plan_seed: int | None) -> str:
    """The fingerprint of what a teacher-forcing round of ``cfg`` stores.

    ``plan_seed`` is the seed of the round's episode plan when it picks a subset
    (``train.update_size`` > 0), else None: collecting every episode stores the same set in any
    order, and training reads a store in its canonical order."""
    tree = json.loads(json.dumps(resolved(cfg)))
    config = {key: _pick(tree, key) for key in COLLECTION_KEYS}
    for key in ("simulator.gpu_device_id",):  # where it renders, not what
        section = config.get("simulator")
        if isinstance(section, dict):
            section.pop(key.split(".", 1)[1], None)
    # where the encoders and the mapper run, and the libraries doing it, change the stored
    # floats (cuDNN and TF32 on a GPU, oneDNN kernels on a CPU)
    config["device"] = str(cfg.train.device).split(":")[0]
    return fpr.digest({"format": FORMAT, "config": config, "files": fpr.data_files(files), "scenes": scenes,
                       "encoders": frozen_encoder_digests(policy), "plan_seed": plan_seed, "code": fpr.code_digest(),
                       "version": fpr.ivln_ce.__version__, "dependencies": fpr.dependency_versions()})


def _cache_root(folder: str | Path) -> Path:
    root = Path(folder)
    if root.is_symlink():
        raise StoreCacheError(f"train.store_cache: {root} is a symbolic link; name the folder itself")
    if root.exists() and not root.is_dir():
        raise StoreCacheError(f"train.store_cache: {root} is not a folder")
    return root


def _entry_problem(entry: Path, fingerprint: str, hashes: bool = True) -> str | None:
    """Why ``entry`` is not a usable store of ``fingerprint`` (None when it is); without
    ``hashes`` the files' contents are left to the caller (``fetch`` checks its copy)."""
    if entry.is_symlink() or not entry.is_dir():
        return "not a folder"
    manifest_file = entry / MANIFEST
    if manifest_file.is_symlink() or not manifest_file.is_file():
        return "no manifest"
    try:
        if manifest_file.stat().st_size > 1 << 20:
            return "manifest larger than 1 MiB"
        manifest = json.loads(manifest_file.read_text())
    except (OSError, ValueError) as exc:
        return f"unreadable manifest ({exc})"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("fingerprint") != fingerprint:
        return "its manifest names other inputs"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files or not all(isinstance(k, str) and _NAME.match(k) and isinstance(v, dict) for k, v in files.items()):
        return "its manifest lists no valid files"
    store = entry / "store"
    if store.is_symlink() or not store.is_dir():
        return "no store folder"
    present = {p.name for p in store.iterdir()}
    if present != set(files):
        return f"its files differ from the manifest ({sorted(present ^ set(files))[:4]})"
    for name, spec in files.items():
        p = store / name
        if p.is_symlink() or not p.is_file():
            return f"{name} is not a plain file"
        if p.stat().st_size != spec.get("size") or (hashes and fpr.sha256_file(p) != spec.get("sha256")):
            return f"{name} does not match its checksum"
    return None


def fetch(folder: str | Path, fingerprint: str, store_dir: Path) -> dict | None:
    """Copy the cached store of ``fingerprint`` into ``store_dir`` (which must not exist) and
    return its manifest; None when there is no usable entry (a damaged one is named in the log)."""
    if not _FP.match(fingerprint):
        raise ValueError(f"not a fingerprint: {fingerprint!r}")
    root = _cache_root(folder)
    entry = root / fingerprint
    if not entry.exists() and not entry.is_symlink():
        return None
    problem = _entry_problem(entry, fingerprint, hashes=False)  # the layout here; the bytes below, in the copy
    if problem is None:
        manifest = json.loads((entry / MANIFEST).read_text())
        tmp = store_dir.with_name(store_dir.name + ".from-cache")
        if tmp.exists():
            shutil.rmtree(tmp)
        shutil.copytree(entry / "store", tmp, symlinks=True)
        problem = _copy_problem(tmp, manifest["files"])
        if problem:
            shutil.rmtree(tmp, ignore_errors=True)
    if problem:
        log.warning("train.store_cache: %s cannot be reused (%s); collecting anew", entry, problem)
        return None
    try:
        got = TrajectoryStore(tmp)
        got.verify()
        ok = len(got) == manifest.get("episodes") and got.total_steps() == manifest.get("steps")
        got.close()
    except (StoreError, OSError, ValueError) as exc:
        ok = False
        log.warning("train.store_cache: %s does not open as a store (%s); collecting anew", entry, exc)
    if not ok:
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    os.replace(tmp, store_dir)
    return manifest


def _copy_problem(copy: Path, files: dict) -> str | None:
    """Why a copied store does not hold exactly the manifest's files and bytes (None when it does)."""
    copied = {p.name: p for p in copy.iterdir()}
    if set(copied) != set(files):
        return f"its files differ from the manifest ({sorted(set(copied) ^ set(files))[:4]})"
    for name, p in copied.items():
        if p.is_symlink() or fpr.sha256_file(p) != files[name]["sha256"]:
            return f"{name} does not match its checksum"
    return None


def publish(folder: str | Path, fingerprint: str, store_dir: Path) -> Path:
    """Copy a finished teacher-forcing store into the cache under ``fingerprint`` (replacing an
    entry that failed its checks), atomically."""
    if not _FP.match(fingerprint):
        raise ValueError(f"not a fingerprint: {fingerprint!r}")
    root = _cache_root(folder)
    root.mkdir(parents=True, exist_ok=True)
    entry = root / fingerprint
    if entry.exists() and _entry_problem(entry, fingerprint) is None:
        return entry  # another run published the same inputs first
    store = TrajectoryStore(store_dir)
    episodes, steps = len(store), store.total_steps()
    store.close()
    tmp = root / f".{fingerprint}.{os.getpid()}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(store_dir, tmp / "store")
    files = {p.name: {"size": p.stat().st_size, "sha256": fpr.sha256_file(p)} for p in sorted((tmp / "store").iterdir())}
    manifest = {"format": FORMAT, "fingerprint": fingerprint, "episodes": episodes, "steps": steps, "files": files}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    if entry.exists() and _entry_problem(entry, fingerprint) is None:  # published meanwhile by another run: keep it
        shutil.rmtree(tmp, ignore_errors=True)
        return entry
    if entry.exists() or entry.is_symlink():  # damaged: only an entry this cache wrote is replaced
        if not _written_here(entry):
            shutil.rmtree(tmp, ignore_errors=True)
            raise StoreCacheError(f"train.store_cache: {entry} is not an entry this cache wrote; remove it or use another folder")
        shutil.rmtree(entry)
    os.replace(tmp, entry)
    return entry


def _written_here(entry: Path) -> bool:
    """Whether ``entry`` is a real folder holding a manifest of this cache's format (possibly
    damaged elsewhere): the only kind of folder ``publish`` replaces."""
    manifest = entry / MANIFEST
    if entry.is_symlink() or not entry.is_dir() or manifest.is_symlink() or not manifest.is_file():
        return False
    try:
        return manifest.stat().st_size <= 1 << 20 and FORMAT in manifest.read_text(errors="replace")
    except OSError:
        return False
