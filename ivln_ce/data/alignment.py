"""Instruction-to-path alignment: which words of an instruction describe which part of its path.

An optional per-episode field, ``instruction_alignment``, holds it as a list of segments::

    "instruction_alignment": [{"tokens": [0, 4], "path": [0, 0]},
                              {"tokens": [4, 13], "path": [0, 1]}, ...]

``tokens`` is a half-open span ``[start, end)`` of positions in the episode's token list
(padding excluded); ``path`` a closed span ``[first, last]`` of ``reference_path`` indices that
those words describe (``first == last``: words said at one point, such as "stop by the bed" at
the goal). Segments are listed in instruction order, their token spans do not overlap, and both
path ends never go backwards. Tokens between segments may be left unaligned.

Behavioural probes (``ivln_ce.probe``) need it to cut an instruction where its path is cut.
The synthetic benchmark writes it (its instructions are built leg by leg); the released
R2R-VLN-CE files have none. The rules are checked on load so that a hostile or broken file
fails with the episode and field named, in time bounded by the instruction's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ivln_ce.data.jsonio import describe, short_repr

ALIGNMENT_KEY = "instruction_alignment"
#: a segment covers at least one token, so an instruction of N tokens has at most N segments;
#: this caps the list whatever the token count
MAX_SEGMENTS = 4096


class AlignmentProblem(ValueError):
    """One defect of an alignment field; ``where`` is the sub-field (``[3].tokens``)."""

    def __init__(self, where: str, message: str):
        self.where = where
        self.message = message
        super().__init__(f"{ALIGNMENT_KEY}{where}: {message}")


@dataclass(frozen=True)
class AlignedSegment:
    """Tokens ``[token_start, token_end)`` describe ``reference_path[path_first..path_last]``."""

    token_start: int
    token_end: int
    path_first: int
    path_last: int

    def to_json(self) -> dict[str, list[int]]:
        return {"tokens": [self.token_start, self.token_end], "path": [self.path_first, self.path_last]}


@dataclass(frozen=True)
class InstructionAlignment:
    segments: tuple[AlignedSegment, ...]

    def to_json(self) -> list[dict[str, list[int]]]:
        return [s.to_json() for s in self.segments]


def _pair(value: Any, where: str) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise AlignmentProblem(where, f"expected a list of two integers, got {describe(value)}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise AlignmentProblem(where, f"expected two integers, got {short_repr(value)}")
    return value[0], value[1]


def parse_alignment(raw: Any, n_tokens: int, n_path: int) -> InstructionAlignment:
    """Check ``raw`` against an instruction of ``n_tokens`` tokens and a reference path of
    ``n_path`` points; raises ``AlignmentProblem`` at the first defect."""
    if not isinstance(raw, list) or not raw:
        raise AlignmentProblem("", f"expected a non-empty list of segments, got {describe(raw)}")
    limit = min(n_tokens, MAX_SEGMENTS)
    if len(raw) > limit:
        raise AlignmentProblem("", f"{len(raw)} segments, more than the {limit} the {n_tokens}-token instruction allows "
                                   f"(a segment covers at least one token)")
    out: list[AlignedSegment] = []
    for k, item in enumerate(raw):
        where = f"[{k}]"
        if not isinstance(item, dict) or set(item) != {"tokens", "path"}:
            got = describe(item) if not isinstance(item, dict) else f"keys {short_repr(sorted(item))}"
            raise AlignmentProblem(where, f"expected an object with exactly 'tokens' and 'path', got {got}")
        t0, t1 = _pair(item["tokens"], f"{where}.tokens")
        if not 0 <= t0 < t1 <= n_tokens:
            raise AlignmentProblem(f"{where}.tokens", f"[{t0}, {t1}) is not a non-empty span of the {n_tokens} instruction tokens")
        p0, p1 = _pair(item["path"], f"{where}.path")
        if not 0 <= p0 <= p1 < n_path:
            raise AlignmentProblem(f"{where}.path", f"[{p0}, {p1}] is not a span of reference_path indices 0..{n_path - 1}")
        if out:
            prev = out[-1]
            if t0 < prev.token_end:
                raise AlignmentProblem(f"{where}.tokens", f"starts at {t0}, inside or before the previous segment's "
                                                          f"tokens [{prev.token_start}, {prev.token_end})")
            if p0 < prev.path_first or p1 < prev.path_last:
                raise AlignmentProblem(f"{where}.path", f"[{p0}, {p1}] goes back along the path from the previous "
                                                        f"segment's [{prev.path_first}, {prev.path_last}]")
        out.append(AlignedSegment(t0, t1, p0, p1))
    return InstructionAlignment(tuple(out))
