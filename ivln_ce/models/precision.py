"""One switch for the arithmetic of a policy's forward pass: fp32, or bfloat16 autocast.

bf16 autocast runs matrix products and convolutions in bfloat16 (fast on CPUs with AVX-512 BF16
and on GPUs) while the weights, the optimizer, the GRU state and the losses stay float32, so a
checkpoint trained either way loads and evaluates either way. Whether results hold under it is
measured, not assumed (``scripts/bench_precision.py``, docs/results/precision.md).
"""

from __future__ import annotations

import contextlib

import torch


def autocast(precision, device) -> contextlib.AbstractContextManager:
    """The context to run a forward pass in: nothing for fp32, ``torch.autocast`` (bf16) for bf16."""
    name = getattr(precision, "value", precision)
    if name == "fp32":
        return contextlib.nullcontext()
    if name != "bf16":
        raise ValueError(f"precision must be fp32 or bf16, got {name!r}")
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
