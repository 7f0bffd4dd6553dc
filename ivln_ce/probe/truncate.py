"""Where an aligned episode can be cut, and which words are kept when it is.

Following the seed paper, the path is cut at an aligned point p_j (never the first or the
last), and the instruction keeps the words said *before arriving* at p_j: every segment whose
path span ends before j, and those that describe motion ending at j. A segment said *at* p_j
(its span is ``[j, j]``, e.g. "turn left" spoken while standing there) belongs to the next
step, so it is the start of the one-step-ahead text, not of the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from ivln_ce.data.alignment import InstructionAlignment


@dataclass(frozen=True)
class Truncation:
    """Cut at ``reference_path[point]``; keep tokens ``[0, prefix_tokens)`` (truncated
    instruction) or ``[0, next_tokens)`` (with the next aligned segment)."""

    point: int
    prefix_tokens: int
    next_tokens: int
    #: how many segments the prefix keeps (the truncated episode's own alignment)
    prefix_segments: int


def truncations(alignment: InstructionAlignment, path_length: int) -> list[Truncation]:
    """Every cut point of an aligned episode, in path order (none for a path of < 3 points)."""
    segs = alignment.segments
    out: list[Truncation] = []
    for k, seg in enumerate(segs):
        j = seg.path_last
        if not 1 <= j <= path_length - 2 or seg.path_first == j:
            continue  # the ends are not probed; words said at p_j do not bring the agent there
        if k + 1 >= len(segs):
            continue  # nothing is said beyond p_j: no next step to compare with
        nxt = segs[k + 1]
        if nxt.path_last == j and nxt.path_first < j:
            continue  # more words describe the way to p_j: the cut comes after them
        out.append(Truncation(j, seg.token_end, nxt.token_end, k + 1))
    return out
