"""Range checks for the arguments of ``train-compat`` / ``score-instructions`` and the numbers their files hold.

Each check runs before anything is built and raises a ``ValueError`` that names the argument or
field; the CLI turns it into one exit-2 message. Without them a huge size is allocated, a NaN
hyperparameter trains silently, and an unknown device ends in a torch traceback. No torch import
at module level (``check_device`` asks torch only for a CUDA device, through ``config.check_cuda_device``).
"""

from __future__ import annotations

import math
import re
from numbers import Integral, Real

from ivln_ce.config import check_cuda_device
from ivln_ce.data.jsonio import describe

#: seeds go to numpy's and torch's generators: a non-negative 64-bit signed integer
MAX_SEED = 2**63 - 1
_DEVICE = re.compile(r"cpu|cuda(:[0-9]{1,4})?")


def check_int(name: str, value: object, lo: int, hi: int) -> int:
    """``value`` as an int in [lo, hi] (bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name}: expected an integer in [{lo}, {hi}], got {describe(value)}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{name}: expected an integer in [{lo}, {hi}], got {int(value)}")
    return int(value)


def check_float(name: str, value: object, lo: float, hi: float, lo_open: bool = False) -> float:
    """``value`` as a finite float in [lo, hi] (``(lo, hi]`` with ``lo_open``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name}: expected a number, got {describe(value)}")
    v = float(value)
    low = "(" if lo_open else "["
    if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
        raise ValueError(f"{name}: expected a finite number in {low}{lo:g}, {hi:g}], got {v!r}")
    return v


def check_text(name: str, value: object, max_len: int = 4096) -> str:
    """A string of at most ``max_len`` characters without NUL."""
    if not isinstance(value, str) or len(value) > max_len or "\x00" in value:
        raise ValueError(f"{name}: expected a text of at most {max_len} characters, got {describe(value)}")
    return value


def check_device(name: str, device: object) -> str:
    """``cpu``, ``cuda`` or ``cuda:N`` for a device torch sees."""
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise ValueError(f"{name} {describe(device)}: expected cpu, cuda or cuda:N")
    check_cuda_device(name, device)
    return device
