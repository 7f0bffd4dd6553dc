"""Simulators behind one protocol (``base.Simulator``; no torch): the embedded backend for generated
houses (``embedded.py`` with ``render.py``, ``navigation.py``, ``gl_context.py``), the habitat-sim
backend (``habitat.py``, the only importer of ``habitat_sim``), and the greedy geodesic follower
used as expert and oracle (``follower.py``). This module picks a backend (``make_simulator``) and
the render GPU (``resolve_gpu_device``).
"""

from __future__ import annotations

import os

from ivln_ce.config import SimBackend, SimulatorConfig

#: SPEC §2.1 [Official]: the task seed is 100 and worker i of a run uses 100 + i. Callers that
#: run several simulators pass ``TASK_SEED + worker_index``; a lone simulator gets 100.
TASK_SEED = 100


def resolve_gpu_device(config: SimulatorConfig) -> int:
    """The GPU this process renders on: ``simulator.gpu_device_id``, or for -1 the process's
    ``LOCAL_RANK`` (set by torchrun, one GPU per rank) and 0 when that is unset.

    One place for the rule so every backend and every worker of a torchrun job agrees on it;
    without it all ranks would render on GPU 0.
    """
    device = int(config.gpu_device_id)
    if device >= 0:
        return device
    if device != -1:
        raise ValueError(f"simulator.gpu_device_id: expected a device index >= 0 or -1 (local rank), got {device}")
    raw = os.environ.get("LOCAL_RANK", "").strip()
    if not raw:
        return 0
    try:
        rank = int(raw)
    except ValueError:
        raise ValueError(
            f"simulator.gpu_device_id=-1 takes the GPU from the LOCAL_RANK environment variable, "
            f"which is {raw!r}, not an integer; set LOCAL_RANK or simulator.gpu_device_id explicitly"
        ) from None
    if rank < 0:
        raise ValueError(f"LOCAL_RANK={rank} is negative; expected the process's local rank (>= 0)")
    return rank


def make_simulator(config: SimulatorConfig, seed: int = TASK_SEED):
    """The backend named by ``config.backend`` (habitat-sim is imported only when asked for).

    ``seed`` seeds the backend's own randomness (habitat-sim's simulator and pathfinder); pass
    ``TASK_SEED + worker_index`` from multi-worker code. The embedded backend has no hidden
    random state (every sampling call takes an explicit ``numpy`` generator), so it needs none.
    """
    if config.backend == SimBackend.embedded:
        from ivln_ce.sim.embedded import EmbeddedSimulator

        return EmbeddedSimulator(config)
    from ivln_ce.sim.habitat import HabitatSimulator

    return HabitatSimulator(config, seed=seed)
