"""How many CPUs this process may use: its affinity mask (taskset, cgroup cpusets, a pinned
test worker), not the machine's count, so environment workers size their thread pools to
what they can run on instead of oversubscribing it."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs in this process's affinity mask (``os.cpu_count()`` where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return os.cpu_count() or 1
