"""Simulators behind one protocol (``sim.base.Simulator``): embedded and habitat-sim."""

from __future__ import annotations

from ivln_ce.config import SimBackend, SimulatorConfig


def make_simulator(config: SimulatorConfig):
    """The backend named by ``config.backend`` (habitat-sim is imported only when asked for)."""
    if config.backend == SimBackend.embedded:
        from ivln_ce.sim.embedded import EmbeddedSimulator

        return EmbeddedSimulator(config)
    from ivln_ce.sim.habitat import HabitatSimulator

    return HabitatSimulator(config)
