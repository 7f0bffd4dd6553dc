"""What a build kept and why it rejected the rest: per source episode, and for the whole split.

A ``Tally`` is stored with each source episode's record, so a resumed build reports the same
statistics as a fresh one without re-measuring anything; ``statistics.json`` is their sum.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from ivln_ce.data.vocab import Vocabulary, split_words
from ivln_ce.probe.skills import (CONDITIONS, DIRECTION, OBJECT, ROOM, ROOM_VARIANTS, SECTOR_BY_NAME, SECTOR_NAMES, SKILLS, STOP,
                                  STOP_TEMPLATES)


@dataclass
class SectorCount:
    probes: int = 0
    no_free_space: int = 0  # cut points where no ray of the sector was free
    too_few_other_sectors: int = 0  # free, but fewer other free sectors than the rule asks


def _count(raw: Any, what: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ValueError(f"{what}: expected a count, got {raw!r}")
    return raw


@dataclass
class Tally:
    cut_points: int = 0
    probes: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SKILLS})
    #: ``skill:reason`` -> probes not built (``compose.ProbeSkip`` reasons, ``unreachable``, ...)
    skipped: dict[str, int] = field(default_factory=dict)
    sectors: dict[str, SectorCount] = field(default_factory=lambda: {n: SectorCount() for n in SECTOR_NAMES})

    def skip(self, skill: str, reason: str) -> None:
        key = f"{skill}:{reason}"
        self.skipped[key] = self.skipped.get(key, 0) + 1

    def add(self, other: "Tally") -> None:
        self.cut_points += other.cut_points
        for s in SKILLS:
            self.probes[s] += other.probes[s]
        for k, v in other.skipped.items():
            self.skipped[k] = self.skipped.get(k, 0) + v
        for name in SECTOR_NAMES:
            mine, theirs = self.sectors[name], other.sectors[name]
            mine.probes += theirs.probes
            mine.no_free_space += theirs.no_free_space
            mine.too_few_other_sectors += theirs.too_few_other_sectors

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Any) -> "Tally":
        """Read a stored tally; ``ValueError`` for anything but what ``to_json`` writes."""
        if not isinstance(raw, dict) or set(raw) != {"cut_points", "probes", "skipped", "sectors"}:
            raise ValueError("expected a tally object")
        probes, skipped, sectors = raw["probes"], raw["skipped"], raw["sectors"]
        if not isinstance(probes, dict) or set(probes) != set(SKILLS):
            raise ValueError("tally.probes: expected a count per skill")
        if not isinstance(skipped, dict) or not isinstance(sectors, dict) or set(sectors) != set(SECTOR_NAMES):
            raise ValueError("tally: malformed skipped or sectors")
        out = cls(_count(raw["cut_points"], "cut_points"), {s: _count(probes[s], s) for s in SKILLS},
                  {str(k): _count(v, k) for k, v in skipped.items()})
        for name in SECTOR_NAMES:
            c = sectors[name]
            if not isinstance(c, dict) or set(c) != {"probes", "no_free_space", "too_few_other_sectors"}:
                raise ValueError(f"tally.sectors.{name}: malformed")
            out.sectors[name] = SectorCount(**{k: _count(v, k) for k, v in c.items()})
        return out


def statistics(split: str, episodes_file: str, episodes: int, aligned: int, skills: tuple[str, ...],
               tallies: Iterable[Tally], probes: list[dict[str, Any]], vocab: Vocabulary, rules: dict[str, Any]) -> dict[str, Any]:
    """The content of ``statistics.json`` (docs/formats.md); ``rules``: ``free_space_rule`` and
    the object and room rules of the skills built."""
    total = Tally()
    for t in tallies:
        total.add(t)
    per_skill: dict[str, Any] = {}
    for s in skills:
        n = total.probes[s]
        entry: dict[str, Any] = {"probes": n, "episodes": n * len(CONDITIONS[s]), "conditions": list(CONDITIONS[s])}
        if s == STOP:
            used = Counter(p["intervention_text"] for p in probes if p["skill"] == STOP)
            entry["templates"] = {t: used.get(t, 0) for t in STOP_TEMPLATES}
        if s == DIRECTION:
            entry["sectors"] = {name: asdict(c) for name, c in total.sectors.items()}
        if s == OBJECT:
            entry["categories"] = _counts(p["target_object"]["category"] for p in probes if p["skill"] == OBJECT)
        if s == ROOM:
            rooms = [p["target_room"] for p in probes if p["skill"] == ROOM]
            entry["room_types"] = _counts(r["room_type"] for r in rooms)
            entry["variants"] = {v: sum(1 for r in rooms if r["variant"] == v) for v in ROOM_VARIANTS}
            entry["hops"] = {str(k): v for k, v in sorted(Counter(r["hops"] for r in rooms).items())}
        per_skill[s] = entry
    texts = list(STOP_TEMPLATES) if STOP in skills else []
    texts += [SECTOR_BY_NAME[n].template for n in SECTOR_NAMES] if DIRECTION in skills else []
    texts += sorted({p["intervention_text"] for p in probes if p["skill"] in (OBJECT, ROOM)})
    return {
        "split": split,
        "episodes_file": episodes_file,
        "sources": {"episodes": episodes, "with_alignment": aligned, "without_alignment": episodes - aligned,
                    "cut_points": total.cut_points},
        "skills": per_skill,
        "skipped": dict(sorted(total.skipped.items())),
        "out_of_vocabulary": sorted({w for t in texts for w in split_words(t) if w not in vocab}),
        **rules,
    }


def _counts(names: Iterable[str]) -> dict[str, int]:
    """Counts by name, most frequent first (ties by name)."""
    return dict(sorted(Counter(names).items(), key=lambda kv: (-kv[1], kv[0])))
