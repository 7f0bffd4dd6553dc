"""Instruction-trajectory pairs and the 2:1:1 training mix of seed 002 (§4.2, "Sampling hyperparameters").

A clean episode file gives the compatible pairs (each episode's instruction with its path); a
file written by ``ivln-ce data perturb`` gives the incompatible ones, told apart by their
``perturbation`` record: instruction kinds (a changed text on the source path) and trajectory
kinds (the source text on a changed path). Paths are identified by their content (scene and
points, rounded to the millimetre), so the same path in two files is one path.

Batches hold ``batch_size`` pairs in the ratio ground truth : instruction-perturbed :
trajectory-perturbed = 2 : 1 : 1. Ground-truth pairs walk the clean episodes in a seeded
permutation per epoch; each takes its episode's path with an instruction drawn uniformly among
all clean instructions of that path (the benchmark's alternative instructions are the
paraphrase positives). A perturbed pair draws its kind uniformly among the family's kinds
present, then an episode of that kind. Everything is seeded by (seed, epoch). No torch here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ivln_ce.data.episodes import Episode, EpisodeDataset
from ivln_ce.data.jsonio import DataFormatError, describe
from ivln_ce.data.perturb import INSTRUCTION_KINDS, TRAJECTORY_KINDS

CLEAN = "clean"
FAMILIES = ("ground_truth", "instruction", "trajectory")
PERTURBATION_KEY = "perturbation"


def path_key(scene_id: str, points: Sequence[Sequence[float]]) -> str:
    """Content identity of a path: SHA-256 over the scene id and the points in millimetres."""
    mm = np.round(np.asarray(points, dtype=np.float64) * 1000.0).astype(np.int64)
    h = hashlib.sha256(scene_id.encode("utf-8"))
    h.update(str(mm.shape).encode())
    h.update(mm.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class PathRef:
    scene_id: str
    scan: str
    points: tuple[tuple[float, float, float], ...]
    key: str


@dataclass(frozen=True)
class CompatPair:
    """One instruction on one path, as a file gives it."""

    episode_id: str
    text: str
    path: PathRef
    #: ``clean`` or the perturbation kind
    kind: str
    #: ``ground_truth``, ``instruction`` or ``trajectory``
    family: str
    #: the clean episode this one was made from (itself for a clean one)
    source_episode_id: str
    #: the key of the path the instruction truly describes; "" for a changed instruction
    describes: str = ""

    @property
    def label(self) -> int:
        return 1 if self.kind == CLEAN else 0


def family_of(kind: str) -> str:
    if kind == CLEAN:
        return "ground_truth"
    if kind in INSTRUCTION_KINDS:
        return "instruction"
    if kind in TRAJECTORY_KINDS:
        return "trajectory"
    raise KeyError(kind)


def path_of(e: Episode) -> PathRef:
    pts = tuple(tuple(float(v) for v in p) for p in e.reference_path)
    return PathRef(e.scene_id, e.scan, pts, path_key(e.scene_id, pts))


def pairs_of(dataset: EpisodeDataset, where: str, clean_paths: dict[str, str] | None = None) -> list[CompatPair]:
    """The pairs of one episode file. An episode with a ``perturbation`` record is incompatible
    (its kind must be one of ``data perturb``'s); one without is clean. ``clean_paths``
    (trajectory id -> path key of the clean file the perturbed one was made from) lets a
    trajectory-perturbed pair say which path its unchanged instruction describes."""
    out = []
    for e in dataset.episodes:
        path = path_of(e)
        rec = e.extra.get(PERTURBATION_KEY)
        if rec is None:
            out.append(CompatPair(e.episode_id, e.instruction_text, path, CLEAN, "ground_truth", e.episode_id, path.key))
            continue
        kind = rec.get("kind") if isinstance(rec, dict) else None
        try:
            family = family_of(kind) if isinstance(kind, str) and kind != CLEAN else None
        except KeyError:
            family = None
        if family is None:
            raise DataFormatError(f"{where}: episode {e.episode_id}: field perturbation.kind: {describe(kind)} is not a perturbation "
                                  f"of ivln-ce data perturb ({list(INSTRUCTION_KINDS + TRAJECTORY_KINDS)})")
        source = _record_id(rec, "source_episode_id", where, e.episode_id)
        if family == "instruction":
            describes = ""
        else:
            src_traj = _record_id(rec, "source_trajectory_id", where, e.episode_id)
            describes = (clean_paths or {}).get(src_traj, "")
        out.append(CompatPair(e.episode_id, e.instruction_text, path, kind, family, source, describes))
    return out


def _record_id(rec: dict, name: str, where: str, episode_id: str) -> str:
    """An id of a perturbation record (a string or an integer, as episode ids are written)."""
    v = rec.get(name)
    if isinstance(v, bool) or not isinstance(v, (str, int)) or (isinstance(v, str) and len(v) > 1000):
        raise DataFormatError(f"{where}: episode {episode_id}: field perturbation.{name}: expected an id (a string or "
                              f"an integer), got {describe(v)}")
    return str(v)


def clean_path_index(pairs: Sequence[CompatPair], dataset: EpisodeDataset) -> dict[str, str]:
    """trajectory id -> path key of the clean episodes of a file."""
    keys = {p.episode_id: p.path.key for p in pairs if p.kind == CLEAN}
    return {e.trajectory_id: keys[e.episode_id] for e in dataset.episodes if e.episode_id in keys}


@dataclass(frozen=True)
class TrainItem:
    """One pair of a batch: the text of ``instruction`` on the path of ``trajectory``."""

    instruction: CompatPair
    trajectory: CompatPair
    family: str
    kind: str

    @property
    def label(self) -> int:
        return 1 if self.family == "ground_truth" else 0

    @property
    def describes(self) -> str:
        """The path key the instruction truly describes ("" for a changed instruction)."""
        return self.instruction.describes


@dataclass
class MixSampler:
    clean: list[CompatPair]
    perturbed: list[CompatPair]
    batch_size: int
    seed: int = 0
    mix: tuple[int, int, int] = (2, 1, 1)
    _by_path: dict[str, list[CompatPair]] = field(init=False, repr=False)
    _by_kind: dict[str, dict[str, list[CompatPair]]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        total = sum(self.mix)
        if len(self.mix) != 3 or min(self.mix) < 0 or self.mix[0] < 1:
            raise ValueError(f"mix {self.mix}: three non-negative weights, ground truth at least 1")
        if self.batch_size < 1 or self.batch_size * self.mix[0] % total or any(self.batch_size * w % total for w in self.mix):
            raise ValueError(f"batch size {self.batch_size} does not split exactly in the ratio {':'.join(map(str, self.mix))}; "
                             f"use a multiple of {total // np.gcd.reduce(np.array(self.mix))}")
        if any(p.kind != CLEAN for p in self.clean):
            raise ValueError("MixSampler: the clean pairs include perturbed ones")
        if not self.clean:
            raise ValueError("MixSampler: no clean (ground-truth) pairs")
        self._by_path = {}
        for p in self.clean:
            self._by_path.setdefault(p.path.key, []).append(p)
        self._by_kind = {"instruction": {}, "trajectory": {}}
        for p in self.perturbed:
            if p.family not in self._by_kind:
                raise ValueError(f"MixSampler: pair {p.episode_id} of kind {p.kind} is not a perturbed pair")
            self._by_kind[p.family].setdefault(p.kind, []).append(p)
        for fam, w in zip(FAMILIES[1:], self.mix[1:]):
            if w and not self._by_kind[fam]:
                raise ValueError(f"no {fam}-perturbed pairs for the mix {':'.join(map(str, self.mix))} "
                                 f"(perturb the training episodes with {fam} kinds, or give the family weight 0)")

    def counts(self) -> tuple[int, int, int]:
        total = sum(self.mix)
        return tuple(self.batch_size * w // total for w in self.mix)  # type: ignore[return-value]

    def batches_per_epoch(self) -> int:
        return max(1, len(self.clean) // self.counts()[0])

    def epoch(self, epoch: int) -> list[list[TrainItem]]:
        rng = np.random.default_rng([int(self.seed), int(epoch)])
        n_gt, n_ins, n_tra = self.counts()
        order = rng.permutation(len(self.clean))
        if len(order) < n_gt:  # fewer clean episodes than one batch needs: repeat the permutation
            order = np.concatenate([order] * (n_gt // len(order) + 1))
        out = []
        for b in range(self.batches_per_epoch()):
            batch = []
            for i in order[b * n_gt:(b + 1) * n_gt]:
                own = self.clean[int(i)]
                alternatives = self._by_path[own.path.key]
                text = alternatives[int(rng.integers(len(alternatives)))]
                batch.append(TrainItem(text, own, "ground_truth", CLEAN))
            for fam, n in (("instruction", n_ins), ("trajectory", n_tra)):
                kinds = sorted(self._by_kind[fam])
                for _ in range(n):
                    kind = kinds[int(rng.integers(len(kinds)))]
                    pool = self._by_kind[fam][kind]
                    p = pool[int(rng.integers(len(pool)))]
                    batch.append(TrainItem(p, p, fam, kind))
            out.append(batch)
        return out


def exclusion_matrix(items: Sequence[TrainItem]) -> np.ndarray:
    """N x N bools: entry (i, j) is True when instruction i truly describes trajectory j's path
    and i != j (a second match in the batch, left out of the contrastive denominators)."""
    describes = [it.describes for it in items]
    paths = [it.trajectory.path.key for it in items]
    n = len(items)
    ex = np.zeros((n, n), dtype=bool)
    for i in range(n):
        if not describes[i]:
            continue
        for j in range(n):
            if i != j and describes[i] == paths[j]:
                ex[i, j] = True
    return ex
