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


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def device_description(device: str) -> str:
    """What ran a command, for its results: the GPU's name for a CUDA device (when torch is
    loaded: scripted agents never load it), else the CPU and the cores this process may use."""
    import sys

    cpu = f"{cpu_model()}, {usable_cpus()} usable core(s)"
    if str(device).startswith("cuda") and "torch" in sys.modules:
        torch = sys.modules["torch"]
        try:
            index = int(str(device).split(":", 1)[1]) if ":" in str(device) else torch.cuda.current_device()
            return f"{device}: {torch.cuda.get_device_name(index)} (host {cpu})"
        except Exception:  # no CUDA driver: the device string says what was asked for
            return f"{device} (host {cpu})"
    return f"cpu: {cpu}"
