import os

import pytest

from ivln_ce.rollout.cpus import usable_cpus


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_usable_cpus_follow_the_affinity_mask():
    before = os.sched_getaffinity(0)
    assert usable_cpus() == len(before)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert usable_cpus() == 1
    finally:
        os.sched_setaffinity(0, before)
