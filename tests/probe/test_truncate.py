"""Where an aligned episode is cut and which words it keeps (hand-made alignments)."""

from ivln_ce.data.alignment import AlignedSegment, InstructionAlignment
from ivln_ce.probe.truncate import Truncation, truncations


def _al(*segs):
    return InstructionAlignment(tuple(AlignedSegment(*s) for s in segs))


def test_the_synthetic_shape_cuts_at_every_inner_waypoint():
    # "exit the kitchen" said at 0 | leg 0->1 | leg 1->2 | leg 2->3 | "stop by the bed" at 3
    al = _al((0, 3, 0, 0), (3, 9, 0, 1), (9, 14, 1, 2), (14, 20, 2, 3), (20, 25, 3, 3))
    assert truncations(al, 4) == [
        Truncation(point=1, prefix_tokens=9, next_tokens=14, prefix_segments=2),
        Truncation(point=2, prefix_tokens=14, next_tokens=20, prefix_segments=3),
    ]  # never the start or the goal; the one-step-ahead text never reaches the stop sentence


def test_words_said_at_the_cut_point_belong_to_the_next_step():
    # leg 0->1, then "turn left" said standing at 1, then leg 1->2, then leg 2->3
    al = _al((0, 5, 0, 1), (5, 7, 1, 1), (7, 12, 1, 2), (12, 15, 2, 3))
    assert truncations(al, 4) == [
        Truncation(point=1, prefix_tokens=5, next_tokens=7, prefix_segments=1),  # "turn left" is the next step
        Truncation(point=2, prefix_tokens=12, next_tokens=15, prefix_segments=3),
    ]


def test_several_segments_reaching_one_point_are_all_kept_and_gaps_are_allowed():
    # two phrases describe the way to 2 (with unaligned tokens 6..7 between them); 1 is never reached by a segment
    al = _al((0, 6, 0, 2), (8, 11, 1, 2), (11, 16, 2, 4))
    assert truncations(al, 5) == [Truncation(point=2, prefix_tokens=11, next_tokens=16, prefix_segments=2)]


def test_no_cut_without_words_beyond_it_or_on_short_paths():
    assert truncations(_al((0, 5, 0, 1)), 3) == []  # nothing said after point 1
    assert truncations(_al((0, 5, 0, 1), (5, 8, 1, 1)), 2) == []  # a 2-point path has no inner point
