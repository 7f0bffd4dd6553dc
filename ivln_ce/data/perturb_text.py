"""Instruction perturbations (seed 002, Zhao et al. 2021, §3-§4.2): hard negatives of a path.

Each function changes one thing in an instruction's text and reports what it changed; the path
stays the episode's. They follow the paper's failure modes of instruction generators:

* ``direction_swap``: one direction word or phrase becomes its opposite (left/right, up/down,
  into/out of, ...: the paper's direction sets, as opposite pairs, ``DIRECTION_PAIRS``);
* ``landmark_swap`` / ``room_swap``: one object (room) mention becomes another category, drawn
  from what the scene holds or, without a scene, from the split's other mentions; a synonym (the
  same map class, or an entry of ``SYNONYMS``) is never the replacement (the paper's lemma rule);
* ``sentence_shuffle``: the sentences but the last in another order (the paper's phrase swap);
* ``sentence_drop``: one sentence removed; ``truncate``: only a prefix of the words kept.

Matching follows the tokeniser of ``data/vocab.py``: a phrase matches whole words (a word is a
run of word characters and ``-``), case-insensitively, longest phrase first, and a replacement
takes the case of the word it replaces. Every choice comes from the ``rng`` passed in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from ivln_ce.data.vocab import Vocabulary, split_words, text_prefix
from ivln_ce.scenes.categories import CATEGORIES, ROOM_TYPES

#: opposite direction phrases (both ways); the paper's sets around/left/right, bottom/middle/top,
#: up/down, front/back, above/under, enter/exit, backward/forward, away from/towards,
#: into/out of, inside/outside as pairs ("around" and "middle" have no single opposite)
DIRECTION_PAIRS: tuple[tuple[str, str], ...] = (
    ("left", "right"),
    ("up", "down"),
    ("upstairs", "downstairs"),
    ("upward", "downward"),
    ("top", "bottom"),
    ("above", "below"),
    ("forward", "backward"),
    ("forwards", "backwards"),
    ("enter", "exit"),
    ("enters", "exits"),
    ("entering", "exiting"),
    ("inside", "outside"),
    ("into", "out of"),
    ("towards", "away from"),
    ("in front of", "behind"),
    ("clockwise", "counterclockwise"),
)
#: structure that is no landmark (the floor under every path)
NOT_LANDMARKS = frozenset({"wall", "floor", "ceiling"})
#: landmark names beyond the embedded categories (words of R2R instructions)
EXTRA_LANDMARKS = (
    "couch", "stairs", "staircase", "steps", "fridge", "mirror", "painting", "shelf", "dresser", "ottoman",
    "piano", "bench", "column", "pillar", "statue", "vase", "shower", "fountain", "doorway", "railing",
    "television", "bookcase", "dining table", "coffee table", "stool", "tub",
)
#: room names beyond the embedded region types
EXTRA_ROOMS = (
    "laundry room", "closet", "garage", "lounge", "study", "foyer", "entryway", "hall", "porch", "balcony",
    "library", "game room", "tv room", "gym", "lobby", "patio", "utility room",
)
#: names that mean the same thing (mapped to one key; never swapped for each other)
SYNONYMS: dict[str, str] = {
    "couch": "sofa", "fridge": "refrigerator", "staircase": "stairs", "steps": "stairs", "painting": "picture",
    "bookcase": "bookshelf", "shelf": "bookshelf", "television": "tv", "doorway": "door", "dresser": "chest of drawers",
    "tub": "bathtub", "dining table": "table", "coffee table": "table", "pillar": "column",
    "hall": "hallway", "foyer": "entryway", "lobby": "entryway", "lounge": "family room", "patio": "porch",
}
LANDMARKS: tuple[str, ...] = tuple(sorted({*(c for c in CATEGORIES if c not in NOT_LANDMARKS), *EXTRA_LANDMARKS}))
ROOMS: tuple[str, ...] = tuple(sorted({*ROOM_TYPES, *EXTRA_ROOMS}))
#: share of the words ``truncate`` keeps: uniform over [low, high] of the word count
TRUNCATE_RANGE = (0.25, 0.75)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Skipped:
    """Nothing to change (``reason`` goes to the statistics)."""

    reason: str


@dataclass(frozen=True)
class TextEdit:
    """A perturbed instruction and what changed (``detail`` goes to the episode's record)."""

    text: str
    detail: dict[str, Any] = field(default_factory=dict)


def synonym_key(name: str) -> str:
    """Names with one key are synonyms: the same map class (chair/armchair) or a ``SYNONYMS`` entry."""
    name = SYNONYMS.get(name, name)
    cat = CATEGORIES.get(name)
    return f"class:{cat.class_id}" if cat is not None and cat.class_id > 0 else name


def phrase_pattern(phrases: Iterable[str]) -> re.Pattern[str]:
    """Whole-word, case-insensitive matches of ``phrases``, the longest first."""
    alts = sorted({p.lower() for p in phrases}, key=lambda p: (-len(p), p))
    body = "|".join(r"\s+".join(re.escape(w) for w in p.split()) for p in alts)
    return re.compile(rf"(?<![\w-])(?:{body})(?![\w-])", re.IGNORECASE)


def match_case(source: str, replacement: str) -> str:
    """``replacement`` spelled with the capitalisation of ``source`` (LEFT, Left or left)."""
    if len(source) > 1 and source.isupper():
        return replacement.upper()
    if source[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


def in_vocabulary(phrase: str, vocab: Vocabulary | None) -> bool:
    """Whether every word of ``phrase`` has its own token (a swap to ``<unk>`` would be trivial to spot)."""
    return vocab is None or all(w in vocab for w in split_words(phrase))


def _fix_article(text: str, start: int, replacement: str) -> tuple[str, int]:
    """Make an "a"/"an" right before ``start`` agree with ``replacement``; returns the text and the shift."""
    m = re.search(r"(?<![\w-])(an?)(\s+)$", text[:start], re.IGNORECASE)
    if not m:
        return text, 0
    want = "an" if replacement[:1].lower() in "aeiou" else "a"
    new = match_case(m.group(1), want)
    return text[: m.start(1)] + new + text[m.end(1):], len(new) - len(m.group(1))


@dataclass(frozen=True)
class Mention:
    start: int
    end: int
    text: str

    @property
    def name(self) -> str:
        return " ".join(self.text.lower().split())


def mentions(text: str, pattern: re.Pattern[str]) -> list[Mention]:
    return [Mention(m.start(), m.end(), m.group(0)) for m in pattern.finditer(text)]


_DIRECTION_OPPOSITE = {**{a: b for a, b in DIRECTION_PAIRS}, **{b: a for a, b in DIRECTION_PAIRS}}
_DIRECTIONS = phrase_pattern(_DIRECTION_OPPOSITE)
#: landmarks and rooms are matched together so "kitchen island" is never the room "kitchen"
_ENTITIES = phrase_pattern((*LANDMARKS, *ROOMS))
_ROOM_SET = frozenset(ROOMS)


def direction_swap(text: str, rng: np.random.Generator, vocab: Vocabulary | None = None) -> TextEdit | Skipped:
    """One direction phrase, drawn uniformly, becomes its opposite."""
    found = [m for m in mentions(text, _DIRECTIONS) if in_vocabulary(_DIRECTION_OPPOSITE[m.name], vocab)]
    if not found:
        return Skipped("no_direction")
    m = found[int(rng.integers(len(found)))]
    new = match_case(m.text, _DIRECTION_OPPOSITE[m.name])
    return TextEdit(text[: m.start] + new + text[m.end:], {"from": m.text, "to": new, "char": m.start, "candidates": len(found)})


def entity_mentions(text: str, rooms: bool) -> list[Mention]:
    """Landmark (``rooms`` False) or room mentions of ``text``."""
    return [m for m in mentions(text, _ENTITIES) if (m.name in _ROOM_SET) == rooms]


def split_pool(texts: Iterable[str], rooms: bool) -> tuple[str, ...]:
    """The landmark (room) names the instructions mention, sorted: the replacements without a scene."""
    names = {m.name for t in texts for m in entity_mentions(t, rooms)}
    return tuple(sorted(names))


def entity_swap(text: str, pool: Sequence[str], rng: np.random.Generator, rooms: bool,
                vocab: Vocabulary | None = None) -> TextEdit | Skipped:
    """One landmark (room) mention, drawn uniformly among those with a replacement, becomes a
    non-synonym name of ``pool`` (drawn uniformly); an "a"/"an" before it follows the new name."""
    found = entity_mentions(text, rooms)
    if not found:
        return Skipped("no_room" if rooms else "no_landmark")
    usable = sorted({p for p in pool if in_vocabulary(p, vocab)})
    options = [(m, [p for p in usable if synonym_key(p) != synonym_key(m.name)]) for m in found]
    options = [(m, c) for m, c in options if c]
    if not options:
        return Skipped("no_replacement")
    m, choices = options[int(rng.integers(len(options)))]
    new = match_case(m.text, choices[int(rng.integers(len(choices)))])
    out, shift = _fix_article(text[: m.start], m.start, new)
    out = out + new + text[m.end:]
    return TextEdit(out, {"from": m.text, "to": new, "char": m.start + shift, "choices": len(choices)})


def sentences(text: str) -> tuple[str, list[str], str]:
    """Leading space, the sentences (split after ., ! or ? and a space), trailing space."""
    body = text.strip()
    lead = text[: len(text) - len(text.lstrip())]
    trail = text[len(text.rstrip()):]
    return lead, [s for s in _SENTENCE_END.split(body) if s] if body else [], trail


#: up to this many sentences an order is drawn as one index among the n! - 1 (20! < 2**63)
_INDEXED_ORDERS = 20


def sentence_shuffle(text: str, rng: np.random.Generator) -> TextEdit | Skipped:
    """All sentences but the last in a new order (a uniform non-identity permutation)."""
    lead, parts, trail = sentences(text)
    n = len(parts) - 1
    if n < 2:
        return Skipped("too_few_sentences")
    if n <= _INDEXED_ORDERS:
        perms = math.factorial(n) - 1  # non-identity orders: draw an index, skip the identity
        order = _nth_permutation(n, 1 + int(rng.integers(perms)))
    else:  # n! exceeds a 64-bit draw: a uniform permutation, redrawn in the (1 / n!) case it is the identity
        order = list(range(n))
        while order == list(range(n)):
            order = [int(i) for i in rng.permutation(n)]
    new = [parts[i] for i in order] + [parts[-1]]
    return TextEdit(lead + " ".join(new) + trail, {"order": [*order, n], "sentences": len(parts)})


def _nth_permutation(n: int, k: int) -> list[int]:
    """The ``k``-th permutation of 0..n-1 in lexicographic order (0 is the identity)."""
    items, out = list(range(n)), []
    for i in range(n, 0, -1):
        f = math.factorial(i - 1)
        out.append(items.pop(k // f))
        k %= f
    return out


def sentence_drop(text: str, rng: np.random.Generator) -> TextEdit | Skipped:
    """One sentence, drawn uniformly, removed."""
    lead, parts, trail = sentences(text)
    if len(parts) < 2:
        return Skipped("too_few_sentences")
    k = int(rng.integers(len(parts)))
    return TextEdit(lead + " ".join(parts[:k] + parts[k + 1:]) + trail, {"dropped": k, "sentences": len(parts)})


def truncate(text: str, rng: np.random.Generator, share: tuple[float, float] = TRUNCATE_RANGE) -> TextEdit | Skipped:
    """The first k words (tokeniser words, punctuation included), k uniform over ``share`` of the count."""
    n = len(split_words(text))
    lo, hi = max(1, math.ceil(share[0] * n)), min(n - 1, math.floor(share[1] * n))
    if n < 2 or lo > hi:
        return Skipped("too_short")
    k = int(rng.integers(lo, hi + 1))
    return TextEdit(text_prefix(text, k), {"kept_words": k, "words": n})
