"""Fingerprints: a result is reused only when it provably came from the same inputs.

A fingerprint is a SHA-256 over a canonical JSON of what decides a result: the resolved
config minus purely cosmetic keys (where results go, how many processes, progress and
recording options) and minus file *paths*, which are replaced by the SHA-256 of the files'
contents (episodes, references, tours, scenes, checkpoints, weights, known maps), plus the
package version and a digest of the package's own source files, so a code change also
invalidates cached results. Every per-tour result file stores the fingerprint of the run
that made it; resuming reuses only files whose fingerprint matches (``evaluation.evaluator``).
The same mechanism guards the synthetic benchmark's per-house cache and the demo.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

import ivln_ce

#: config keys that cannot change a per-tour result (dotted; a prefix removes a subtree)
COSMETIC_KEYS = (
    "name",
    "results_dir",
    "eval.num_envs",
    "eval.envs_per_worker",
    "eval.groups",
    "eval.policy_process",  # batch-1 and batched policies compute the same function
    "eval.resume",
    "eval.label",
    "eval.tours",  # which tours run does not change any one tour's result
    "eval.poll",
    "eval.poll_timeout",
    "eval.poll_interval",
    "eval.save_frames",
    "eval.video",
    "mapping.save_images",
    "mapping.backend",  # the backends are bit-identical (tests/mapping)
    "simulator.gpu_device_id",
    "metrics.tndtw",  # scoring of the gathered paths; per-tour records do not depend on it
    "train",  # training switches (an evaluation never trains)
)
#: config keys holding file or folder paths: replaced by content digests in the fingerprint
PATH_KEYS = (
    "data",
    "mapping.known_maps_dir",
    "mapping.rednet_checkpoint",
    "policy.checkpoint",
    "policy.ddppo_weights",
    "policy.rgb_weights",
    "policy.embeddings",
    "simulator.scene_dataset_config",
)
_CHUNK = 1 << 20


def _drop(tree: dict, dotted: str) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        node = node.get(p)
        if not isinstance(node, dict):
            return
    node.pop(parts[-1], None)


def fingerprint_config(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config without cosmetic keys and without paths (a deep copy)."""
    tree = json.loads(json.dumps(resolved))
    for key in (*COSMETIC_KEYS, *PATH_KEYS):
        _drop(tree, key)
    return tree


def sha256_file(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read now (no cache: for content that must be checked as it is)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(_CHUNK)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


@lru_cache(maxsize=4096)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(path)


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes ("missing" when absent); cached per (path, size, mtime)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return "missing"
    if not p.is_file():
        return "not-a-file"
    return _file_digest(str(p.resolve()), st.st_size, st.st_mtime_ns)


def folder_digest(folder: str | Path, pattern: str = "*") -> str:
    """SHA-256 over the names and digests of the files directly in ``folder`` matching ``pattern``."""
    folder = Path(folder)
    if not folder.is_dir():
        return "missing"
    h = hashlib.sha256()
    for f in sorted(folder.glob(pattern)):
        if f.is_file() and not f.name.startswith("."):
            h.update(f.name.encode())
            h.update(file_digest(f).encode())
    return h.hexdigest()


@lru_cache(maxsize=64)
def code_digest(*subpaths: str) -> str:
    """SHA-256 over the package's Python sources (relative path + bytes); with ``subpaths``
    (e.g. ``"scenes"``, ``"data/instructions.py"``) only those modules and packages."""
    root = Path(ivln_ce.__file__).resolve().parent
    files = sorted(root.rglob("*.py")) if not subpaths else sorted(
        f for sp in subpaths for f in ([root / sp] if sp.endswith(".py") else (root / sp).rglob("*.py")))
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def digest(obj: Any) -> str:
    """SHA-256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


@dataclass
class Fingerprint:
    """The inputs of a run and their digest. ``for_scan`` adds one scene's files."""

    config: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)  # role -> file digest
    version: str = ivln_ce.__version__
    code: str = field(default_factory=code_digest)
    scenes: dict[str, str] = field(default_factory=dict)  # scan -> folder digest

    @property
    def core(self) -> str:
        return digest({"config": self.config, "files": self.files, "version": self.version, "code": self.code})

    def for_scan(self, scan: str) -> str:
        """The fingerprint of one tour's result: the run's core plus its scene's files."""
        return digest({"core": self.core, "scan": scan, "scene": self.scenes.get(scan, "missing")})

    def as_dict(self) -> dict[str, Any]:
        return {"core": self.core, "version": self.version, "code": self.code, "files": dict(self.files),
                "scenes": dict(self.scenes), "config": self.config}


def scene_folder(scenes_dir: str | Path, scene_id: str) -> Path:
    """The folder holding a scene's files (``.glb`` plus its navmesh / semantic sidecars)."""
    return (Path(scenes_dir) / scene_id).parent


def data_files(named: Mapping[str, str | Path | None]) -> dict[str, str]:
    """Digests of the named files; roles whose path is empty are left out."""
    return {role: file_digest(p) for role, p in named.items() if p}


def scene_digests(scenes_dir: str | Path, scene_ids: Iterable[tuple[str, str]]) -> dict[str, str]:
    """scan -> digest of its scene folder, for (scan, scene_id) pairs."""
    out: dict[str, str] = {}
    for scan, scene_id in scene_ids:
        if scan not in out:
            out[scan] = folder_digest(scene_folder(scenes_dir, scene_id), f"{scan}*")
    return out


def dependency_versions() -> dict[str, str | None]:
    """Versions of the libraries that can change numbers (for the results manifest)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in ("numpy", "numba", "scipy", "torch", "moderngl", "glcontext", "embreex", "scikit-fmm", "habitat-sim", "triton"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = ".".join(map(str, __import__("sys").version_info[:3]))
    out["platform"] = os.uname().sysname + " " + os.uname().machine
    return out
