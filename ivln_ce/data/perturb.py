"""Perturbed episode files (seed 002, §3-§4.2): hard negatives of an episode file, each one
named and recorded in an optional ``perturbation`` field.

Instruction kinds (``data/perturb_text.py``) rewrite the text and re-tokenise it with the file's
vocabulary; the path, start, goal and every other field stay the source episode's (its
``trajectory_id`` too: the path is the same). Trajectory kinds (``data/perturb_paths.py``) keep
the instruction and change the path of each source path once (all its instructions share the
new path and a new ``trajectory_id``); the goal becomes the new path's last point and
``info.geodesic_distance`` the navigator's start-goal distance. An episode that a kind cannot
change (no direction word, one sentence, a one-segment path...) gives no episode for that kind;
the statistics count it under its reason.

The module is pure: the navigator and the scenes' category and room names are injected
(``benchmark/perturb.py``). Every choice is drawn from a generator seeded by (seed, kind,
episode id) for instruction kinds and (seed, kind, scan, trajectory id) for trajectory kinds, so
an episode's perturbation does not depend on the other episodes or on the other kinds asked
for. Output order: instruction kinds in ``KINDS`` order, each in the input's order; then the
trajectory kinds by scan (sorted), then kind, then paths in order of first appearance, so each scene loads once);
``episode_id`` 1, 2, ... in that order; a changed path gets the next ``trajectory_id`` after
the input's largest numeric one.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ivln_ce.data.episodes import PERTURBATION_KEY, Episode, EpisodeDataset, EpisodeFormatError, Goal, id_to_json
from ivln_ce.data.perturb_paths import Candidate, DetourSettings, Navigator, PathEdit, detour, other_path, partial_reversal
from ivln_ce.data.perturb_text import (Skipped, TextEdit, direction_swap, entity_swap, sentence_drop, sentence_shuffle,
                                       split_pool, truncate)
from ivln_ce.data.r4r import MAX_PADDED_LENGTH, MAX_SEED, SourcePath, check_count, check_distance, path_length, source_paths

INSTRUCTION_KINDS = ("direction_swap", "landmark_swap", "room_swap", "sentence_shuffle", "sentence_drop", "truncate")
TRAJECTORY_KINDS = ("detour", "partial_reversal", "other_path")
KINDS = INSTRUCTION_KINDS + TRAJECTORY_KINDS
#: instruction kinds that swap words in place: the alignment survives when the token count does
_IN_PLACE = ("direction_swap", "landmark_swap", "room_swap")
#: episode extras that describe the path, dropped when the path changes
_PATH_EXTRAS = ("shortest_paths",)


def parse_kinds(text: str | None, trajectories: bool) -> tuple[str, ...]:
    """``a,b,c`` -> kinds in ``KINDS`` order; None: every kind (instruction kinds only when
    ``trajectories`` is False). Unknown or repeated names are a ValueError naming them."""
    if text is None:
        return KINDS if trajectories else INSTRUCTION_KINDS
    names = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in names if k not in KINDS]
    if bad or not names:
        raise ValueError(f"--kinds: unknown kind(s) {bad or [text]}; choose from {list(KINDS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"--kinds: a kind is named twice in {text!r}")
    return tuple(k for k in KINDS if k in names)


@dataclass(frozen=True)
class SceneTerms:
    """The category and room names a scene holds (the replacements of entity swaps)."""

    landmarks: tuple[str, ...]
    rooms: tuple[str, ...]


@dataclass(frozen=True)
class PerturbSettings:
    kinds: tuple[str, ...] = INSTRUCTION_KINDS
    seed: int = 0
    #: other_path: the nearest other start must be closer than this (m, navigator geodesic)
    other_path_threshold: float = 3.0
    detour: DetourSettings = DetourSettings()
    #: token list length; None: the input's, raised to fit the longest perturbed instruction
    padded_length: int | None = None

    def __post_init__(self) -> None:
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ValueError(f"unknown perturbation kind(s) {bad}; choose from {list(KINDS)}")
        check_distance("--other-path-threshold (other_path threshold)", self.other_path_threshold)
        check_count("--seed (seed)", self.seed, 0, MAX_SEED)
        if self.padded_length is not None:
            check_count("--padded-length (padded_length)", self.padded_length, 1, MAX_PADDED_LENGTH)


def kind_rng(seed: int, kind: str, *keys: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(kind.encode()), *(zlib.crc32(k.encode("utf-8")) for k in keys)])


@dataclass
class KindStatistics:
    """One kind's counts over the input's episodes (trajectory kinds: also over paths)."""

    kind: str
    episodes: int = 0
    perturbed: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    paths: int = 0
    perturbed_paths: int = 0
    #: kind-specific counts (other_path: exact / nearest starts; instruction kinds: kept alignments)
    counts: dict[str, int] = field(default_factory=dict)
    mean_length_before: float = 0.0
    mean_length_after: float = 0.0

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n


@dataclass
class Perturbed:
    """One output episode and the source episode whose expert reference it may reuse
    (``reuse_reference``: the path did not change)."""

    episode: Episode
    source: Episode
    reuse_reference: bool


class Perturbation:
    """The perturbed episodes of a file: instruction kinds are computed on construction (they fix
    the padded length), trajectory kinds while ``episodes()`` is iterated (one scene at a time)."""

    def __init__(self, dataset: EpisodeDataset, settings: PerturbSettings,
                 scene_terms: Callable[[str, str], SceneTerms | None] = lambda scan, scene_id: None):
        vocab = dataset.vocab
        if vocab is None:
            raise EpisodeFormatError(dataset.path or "<memory>", ["instruction_vocab.word_list: missing; perturbed "
                                                                   "instructions are tokenised with the file's vocabulary"])
        self.dataset, self.settings, self.vocab = dataset, settings, vocab
        self.stats = {k: KindStatistics(k) for k in settings.kinds}
        texts = [e.instruction_text for e in dataset.episodes]
        self.split_pools = (split_pool(texts, rooms=False), split_pool(texts, rooms=True))
        self.scenes_with_terms: set[str] = set()
        self._terms: dict[str, SceneTerms | None] = {}
        self._scene_terms = scene_terms
        self._edits: list[tuple[str, Episode, TextEdit]] = []
        for kind in settings.kinds:
            if kind in INSTRUCTION_KINDS:
                for e in dataset.episodes:
                    self._instruction_edit(kind, e)
        base = len(dataset.episodes[0].instruction_tokens) if dataset.episodes else 0
        need = max((len(vocab.encode(t.text, None)) for _, _, t in self._edits), default=0)
        self.padded_length = settings.padded_length or max(base, need)
        self.truncated_instructions = sum(len(vocab.encode(t.text, None)) > self.padded_length for _, _, t in self._edits)

    # ------------------------------------------------------------------ instruction kinds
    def _pools(self, e: Episode) -> tuple[tuple[str, ...], tuple[str, ...]]:
        if e.scan not in self._terms:
            self._terms[e.scan] = self._scene_terms(e.scan, e.scene_id)
        terms = self._terms[e.scan]
        if terms is None:
            return self.split_pools
        self.scenes_with_terms.add(e.scan)
        return terms.landmarks, terms.rooms

    def _instruction_edit(self, kind: str, e: Episode) -> None:
        st = self.stats[kind]
        st.episodes += 1
        rng = kind_rng(self.settings.seed, kind, e.episode_id)
        text = e.instruction_text
        if kind == "direction_swap":
            got = direction_swap(text, rng, self.vocab)
        elif kind in ("landmark_swap", "room_swap"):
            rooms = kind == "room_swap"
            got = entity_swap(text, self._pools(e)[rooms], rng, rooms, self.vocab)
        elif kind == "sentence_shuffle":
            got = sentence_shuffle(text, rng)
        elif kind == "sentence_drop":
            got = sentence_drop(text, rng)
        else:
            got = truncate(text, rng)
        if isinstance(got, Skipped):
            st.skip(got.reason)
        elif got.text == text:  # a defensive check: every kind changes the text it returns
            st.skip("unchanged")
        else:
            st.perturbed += 1
            self._edits.append((kind, e, got))

    def _text_episode(self, kind: str, e: Episode, edit: TextEdit, episode_id: int) -> Episode:
        ids = self.vocab.encode(edit.text, None)
        keep = kind in _IN_PLACE and e.alignment is not None and len(ids) == len(self.vocab.encode(e.instruction_text, None))
        if keep:
            self.stats[kind].count("alignment_kept")
        detail = {**edit.detail, "alignment_dropped": e.alignment is not None and not keep}
        return _derived(e, episode_id, e.trajectory_id, kind, detail, instruction_text=edit.text,
                        instruction_tokens=self.vocab.encode(edit.text, self.padded_length),
                        alignment=e.alignment if keep else None)

    # ------------------------------------------------------------------ trajectory kinds
    def episodes(self, nav_for: Callable[[str, str], Navigator] | None = None,
                 progress: Callable[[list[str]], Any] | None = None) -> Iterator[Perturbed]:
        """Every output episode in order; ``nav_for(scan, scene_id)`` loads a scene's navigator
        (needed only for trajectory kinds)."""
        next_id = 1
        for kind, e, edit in self._edits:
            yield Perturbed(self._text_episode(kind, e, edit, next_id), e, True)
            next_id += 1
        kinds = [k for k in self.settings.kinds if k in TRAJECTORY_KINDS]
        if not kinds:
            return
        if nav_for is None:
            raise ValueError(f"trajectory perturbations {kinds} need a navigator (a simulator: --scenes-dir)")
        numeric = [int(e.trajectory_id) for e in self.dataset.episodes
                   if e.trajectory_id.isascii() and e.trajectory_id.isdigit() and len(e.trajectory_id) <= 18]
        next_tid = max(numeric, default=0) + 1
        per_scan = source_paths(self.dataset)
        length = {k: [0.0, 0.0] for k in kinds}  # summed over episodes: before, after
        scans = list(per_scan)
        for scan in (progress(scans) if progress else scans):  # one scene load serves every kind
            paths = per_scan[scan]
            nav = nav_for(scan, paths[0].first.scene_id)
            candidates = [Candidate(p.trajectory_id, list(p.start), [list(map(float, q)) for q in p.first.reference_path])
                          for p in paths]
            for kind in kinds:
                st = self.stats[kind]
                for p in paths:
                    st.paths += 1
                    st.episodes += len(p.episodes)
                    got = self._path_edit(kind, scan, p, candidates, nav)
                    if isinstance(got, Skipped):
                        st.skip(got.reason, len(p.episodes))
                        continue
                    edit, d0 = got
                    detail = dict(edit.detail)
                    if "other_trajectory_id" in detail:
                        detail["other_trajectory_id"] = id_to_json(detail["other_trajectory_id"])
                        st.count(f"{detail['start_match']}_start")
                    st.perturbed_paths += 1
                    tid = str(next_tid)
                    next_tid += 1
                    goal = edit.points[-1]
                    for e in p.episodes:
                        length[kind][0] += path_length(e.reference_path)
                        length[kind][1] += path_length(edit.points)
                        st.perturbed += 1
                        out = _derived(e, next_id, tid, kind, {**detail, "alignment_dropped": e.alignment is not None},
                                       reference_path=edit.points, alignment=None,
                                       goals=[Goal(position=list(goal), radius=e.goals[0].radius)],
                                       info={**e.info, "geodesic_distance": d0},
                                       instruction_tokens=self.vocab.encode(e.instruction_text, self.padded_length),
                                       drop_extras=_PATH_EXTRAS)
                        next_id += 1
                        yield Perturbed(out, e, False)
        for kind in kinds:
            st = self.stats[kind]
            st.mean_length_before = length[kind][0] / max(st.perturbed, 1)
            st.mean_length_after = length[kind][1] / max(st.perturbed, 1)

    def _path_edit(self, kind: str, scan: str, p: SourcePath, candidates: list[Candidate],
                   nav: Navigator) -> tuple[PathEdit, float] | Skipped:
        """The new path of ``p`` for ``kind`` and its start-goal geodesic, or why there is none."""
        rng = kind_rng(self.settings.seed, kind, scan, p.trajectory_id)
        ref = p.first.reference_path
        if kind == "detour":
            got: PathEdit | Skipped = detour(ref, rng, nav, self.settings.detour)
        elif kind == "partial_reversal":
            got = partial_reversal(ref, rng)
        else:
            found = other_path(p.start, ref, [c for c in candidates if c.trajectory_id != p.trajectory_id], rng, nav,
                               self.settings.other_path_threshold)
            got = found if isinstance(found, Skipped) else found[0]
        if isinstance(got, Skipped):
            return got
        d0 = float(nav.geodesic_distance(p.start, got.points[-1]))
        return (got, d0) if math.isfinite(d0) else Skipped("unreachable_goal")


def _derived(e: Episode, episode_id: int, trajectory_id: str, kind: str, detail: dict[str, Any],
             drop_extras: Sequence[str] = (), **changes: Any) -> Episode:
    """``e`` with ``changes``, a new id and its ``perturbation`` record (other extras kept)."""
    extra = {k: v for k, v in e.extra.items() if k != PERTURBATION_KEY and k not in drop_extras}
    extra[PERTURBATION_KEY] = {"kind": kind, "source_episode_id": id_to_json(e.episode_id),
                               "source_trajectory_id": id_to_json(e.trajectory_id), "detail": detail}
    fields: dict[str, Any] = dict(
        episode_id=str(episode_id), trajectory_id=trajectory_id, scene_id=e.scene_id,
        start_position=list(e.start_position), start_rotation=list(e.start_rotation), info=dict(e.info),
        goals=[Goal(list(g.position), g.radius) for g in e.goals], instruction_text=e.instruction_text,
        instruction_tokens=list(e.instruction_tokens), reference_path=[list(p) for p in e.reference_path],
        extra=extra, alignment=e.alignment,
    )
    fields.update(changes)
    return Episode(**fields)


def statistics_rows(stats: dict[str, KindStatistics]) -> list[dict[str, Any]]:
    return [{"kind": s.kind, "episodes": s.episodes, "perturbed": s.perturbed, "skipped": sum(s.skipped.values()),
             "skip_reasons": dict(sorted(s.skipped.items())), "paths": s.paths, "perturbed_paths": s.perturbed_paths,
             "counts": dict(sorted(s.counts.items())), "mean_length_before": round(s.mean_length_before, 4),
             "mean_length_after": round(s.mean_length_after, 4)} for s in stats.values()]


def format_statistics(stats: dict[str, KindStatistics]) -> str:
    """A markdown table: per kind, input episodes, perturbed, skipped (by reason), notes."""
    lines = ["| kind | input episodes | perturbed | skipped (reason: n) | notes |", "|---|---:|---:|---|---|"]
    for r in statistics_rows(stats):
        reasons = ", ".join(f"{k}: {v}" for k, v in r["skip_reasons"].items()) or "-"
        notes = [f"{k}: {v}" for k, v in r["counts"].items()]
        if r["paths"]:
            notes.insert(0, f"paths {r['perturbed_paths']}/{r['paths']}, mean length {r['mean_length_before']:.2f} -> "
                            f"{r['mean_length_after']:.2f} m")
        lines.append(f"| {r['kind']} | {r['episodes']} | {r['perturbed']} | {r['skipped']} ({reasons}) | {'; '.join(notes) or '-'} |")
    return "\n".join(lines) + "\n"
