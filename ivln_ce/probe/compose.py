"""Intervention episodes: one source episode cut at one point, in every condition of a skill.

A probe is the truncated path tau with two or more instructions (the truncated one I, and
I + I_int, and for stop also the one-step-ahead text); its episodes differ *only* in the
instruction, so any change in an agent's decision at the end of tau is the instruction's
doing. Each is a complete R2R-VLN-CE episode: the source's start, the path up to p_j as
``reference_path``, p_j as the goal, the start-to-p_j geodesic distance, and the instruction
re-tokenised with the source's vocabulary (the kept words keep their token ids).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ivln_ce.data.alignment import InstructionAlignment
from ivln_ce.data.episodes import Episode, Goal
from ivln_ce.data.vocab import PAD_INDEX, Vocabulary, split_words, text_prefix
from ivln_ce.fingerprint import digest
from ivln_ce.probe.objects import ObjectTarget
from ivln_ce.probe.rooms import RoomTarget
from ivln_ce.probe.skills import (CONDITIONS, DIRECTION, INTERVENED, OBJECT, ROOM, SECTOR_BY_NAME, STOP, stop_template,
                                  towards_template)
from ivln_ce.probe.truncate import Truncation

#: episode ids that can be written into probe ids (and so into folder names) as they are
_SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SENTENCE_END = (".", "!", "?")


class ProbeSkip(Exception):
    """This probe cannot be built; ``reason`` is a key of the build statistics."""

    def __init__(self, reason: str, detail: str):
        self.reason = reason
        super().__init__(detail)


@dataclass(frozen=True)
class PointContext:
    """What the simulator says about one cut point of one source episode."""

    truncation: Truncation
    #: geodesic distance (m) from the source's start to p_j: the new episodes' info field
    geodesic: float
    #: the heading of an agent arriving at p_j along the path (directions are relative to it)
    heading: float | None
    #: sectors with free space at p_j (``free_space.free_sectors``); None when not measured
    free: tuple[str, ...] | None


@dataclass
class Probe:
    probe_id: str
    skill: str
    source: Episode
    context: PointContext
    #: the target sector of a direction probe
    sector: str | None
    intervention_text: str
    #: token span ``[start, end)`` of ``intervention_text`` in the intervened condition's tokens
    intervention_tokens: tuple[int, int]
    #: condition -> its episode
    episodes: dict[str, Episode] = field(default_factory=dict)
    #: the object or room an object / room probe names
    target: ObjectTarget | RoomTarget | None = None

    @property
    def variant(self) -> str | None:
        """The subset the statistics also report the probe in: its sector, its room probe's hop variant."""
        if self.skill == DIRECTION:
            return self.sector
        return self.target.variant if isinstance(self.target, RoomTarget) else None

    def metadata(self) -> dict[str, Any]:
        """The probe's ``probe.json`` (without the build fingerprint)."""
        cut = self.context.truncation
        return {
            "probe_id": self.probe_id,
            "skill": self.skill,
            "conditions": {name: ep.episode_id for name, ep in self.episodes.items()},
            "intervened_condition": INTERVENED[self.skill],
            "source_episode": self.source.episode_id,
            "source_trajectory": self.source.trajectory_id,
            "scene_id": self.source.scene_id,
            "point": cut.point,
            "source_path_points": len(self.source.reference_path),
            "prefix_tokens": cut.prefix_tokens,
            "next_tokens": cut.next_tokens,
            "intervention_text": self.intervention_text,
            "intervention_tokens": list(self.intervention_tokens),
            "target_sector": self.sector,
            "variant": self.variant,
            "target_object": self.target.to_json() if isinstance(self.target, ObjectTarget) else None,
            "target_room": self.target.to_json() if isinstance(self.target, RoomTarget) else None,
            "heading": self.context.heading,
            "free_sectors": list(self.context.free) if self.context.free is not None else None,
            "geodesic_distance": self.context.geodesic,
        }


def episode_key(episode_id: str) -> str:
    """The source episode's part of a probe id: the id itself when it is a short plain name."""
    return f"e{episode_id}" if _SAFE_ID.fullmatch(episode_id) else f"h{digest(episode_id)[:16]}"


def probe_id(skill: str, episode_id: str, point: int, suffix: str | None = None) -> str:
    """``stop-e61-p2``, ``direction-e61-p2-back_left``, ``object-e61-p2-sofa``,
    ``room-e61-p2-dining_room``: stable across reruns, unique per split. ``suffix`` is a sector
    or a plain name (``skills.plain_name``: lower-case words), its spaces written as ``_``."""
    return f"{skill}-{episode_key(episode_id)}-p{point}" + (f"-{suffix.replace(' ', '_')}" if suffix else "")


def _joined(prefix: str, addition: str) -> str:
    """``prefix`` + ``addition`` as sentences: a full stop is added where the prefix has none."""
    head = prefix.rstrip()
    return f"{head} {addition}" if head.endswith(_SENTENCE_END) or not head else f"{head}. {addition}"


def _tokens(text: str, vocab: Vocabulary, padded: int, what: str) -> list[int]:
    ids = vocab.encode(text, padded_length=None)
    if len(ids) > padded:
        raise ProbeSkip("too_long", f"the {what} instruction has {len(ids)} tokens, more than the file's padded length {padded}")
    return ids + [PAD_INDEX] * (padded - len(ids))


class Composer:
    """Builds the probes of one source episode (its texts are cut once per point)."""

    def __init__(self, source: Episode, vocab: Vocabulary):
        if source.alignment is None:
            raise ValueError(f"episode {source.episode_id!r} has no instruction_alignment")
        self.source = source
        self.vocab = vocab
        self.padded = len(source.instruction_tokens)

    def _episode(self, pid: str, condition: str, ctx: PointContext, text: str, tokens: list[int]) -> Episode:
        src, cut = self.source, ctx.truncation
        kept: InstructionAlignment = InstructionAlignment(src.alignment.segments[: cut.prefix_segments])
        info = dict(src.info)
        info["geodesic_distance"] = ctx.geodesic
        return Episode(
            episode_id=f"{pid}.{condition}",
            trajectory_id=f"{src.trajectory_id}-p{cut.point}",
            scene_id=src.scene_id,
            start_position=list(src.start_position),
            start_rotation=list(src.start_rotation),
            info=info,
            goals=[Goal(position=list(src.reference_path[cut.point]), radius=src.goals[0].radius)],
            instruction_text=text,
            instruction_tokens=tokens,
            reference_path=[list(p) for p in src.reference_path[: cut.point + 1]],
            alignment=kept,
        )

    def _prefix(self, n_tokens: int) -> str:
        try:
            return text_prefix(self.source.instruction_text, n_tokens)
        except ValueError as exc:
            raise ProbeSkip("tokenisation", f"episode {self.source.episode_id!r}: {exc}") from None

    def _check_kept(self, tokens: list[int], n: int, what: str) -> None:
        if tokens[:n] != self.source.instruction_tokens[:n]:
            raise ProbeSkip("tokenisation", f"episode {self.source.episode_id!r}: the {what} instruction's first {n} "
                                            f"tokens differ from the source's")

    def probe(self, skill: str, ctx: PointContext, sector: str | None = None,
              target: ObjectTarget | RoomTarget | None = None) -> Probe:
        """The probe of ``skill`` at ``ctx``'s point (a direction probe needs ``sector``, an
        object probe an ``ObjectTarget``, a room probe a ``RoomTarget``)."""
        cut = ctx.truncation
        if skill == STOP:
            pid = probe_id(skill, self.source.episode_id, cut.point)
            addition = stop_template(pid)
        elif skill == DIRECTION:
            pid = probe_id(skill, self.source.episode_id, cut.point, sector)
            addition = SECTOR_BY_NAME[sector].template
        elif skill == OBJECT and isinstance(target, ObjectTarget):
            pid = probe_id(skill, self.source.episode_id, cut.point, target.category)
            addition = towards_template(target.category)
        elif skill == ROOM and isinstance(target, RoomTarget):
            pid = probe_id(skill, self.source.episode_id, cut.point, target.room_type)
            addition = towards_template(target.room_type)
        else:
            raise ValueError(f"unknown skill {skill!r}, or a {skill} probe without its target")
        prefix = self._prefix(cut.prefix_tokens)
        base = _tokens(prefix, self.vocab, self.padded, "truncated")
        self._check_kept(base, cut.prefix_tokens, "truncated")
        text = _joined(prefix, addition)
        intervened = _tokens(text, self.vocab, self.padded, "intervened")
        n_add = len(split_words(addition))
        end = sum(1 for t in intervened if t != PAD_INDEX)
        span = (end - n_add, end)
        self._check_kept(intervened, cut.prefix_tokens, "intervened")
        if intervened[span[0]:span[1]] != self.vocab.encode(addition, padded_length=None):
            raise ProbeSkip("tokenisation", f"episode {self.source.episode_id!r}: {addition!r} does not tokenise on its own "
                                            f"after the prefix")
        texts = {CONDITIONS[skill][0]: (prefix, base), INTERVENED[skill]: (text, intervened)}
        if skill == STOP:
            ahead = self._prefix(cut.next_tokens)
            ahead_ids = _tokens(ahead, self.vocab, self.padded, "one-step-ahead")
            self._check_kept(ahead_ids, cut.next_tokens, "one-step-ahead")
            texts["one_step_ahead"] = (ahead, ahead_ids)
        out = Probe(pid, skill, self.source, ctx, sector, addition, span, target=target)
        for condition in CONDITIONS[skill]:
            t, ids = texts[condition]
            out.episodes[condition] = self._episode(pid, condition, ctx, t, ids)
        return out
