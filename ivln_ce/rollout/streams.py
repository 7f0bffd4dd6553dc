"""What ``decide`` sees of an active stream each tick (``StreamView``): the type the engine,
the policy agents and the observation pipeline share, kept apart from the engine so that the
modules the worker processes import never import the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class StreamView:
    """One active stream's current observation, as ``decide`` sees it."""

    stream_id: str
    worker: int
    tour_index: int
    tour_id: str
    scan: str
    obs: dict[str, np.ndarray]
    info: dict[str, Any]
    #: True on the first observation of the stream (the tour's reset)
    first: bool = False
    #: the action the environment executed to produce this observation (None after a reset)
    executed_action: int | None = None
