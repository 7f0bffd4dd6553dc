"""One switch for the arithmetic of a policy's forward pass: fp32, or bfloat16 autocast.

bf16 autocast runs matrix products and convolutions in bfloat16 (fast on CPUs with AVX-512 BF16
and on GPUs) while the weights, the optimizer, the recurrent layers (the instruction LSTM and the
GRUs, see ``fp32_region``) and the losses stay float32, so a checkpoint trained either way loads
and evaluates either way. Whether results hold under it is measured, not assumed
(``scripts/bench_precision.py``, docs/results/precision.md).
"""

from __future__ import annotations

import contextlib

import torch


def fp32_region(device: torch.device | str) -> contextlib.AbstractContextManager:
    """Autocast switched off: the recurrent layers run in float32 under bf16 autocast.

    oneDNN has no bfloat16 RNN primitive for CPUs without native bf16 instructions (AVX-512 BF16
    or AMX): the LSTM and GRU then fail ("could not create a primitive descriptor for the LSTM
    forward propagation primitive"). Their cost is small beside the encoders', so they stay
    float32 on every device, and bf16 means the same arithmetic on every machine."""
    return torch.autocast(device_type=torch.device(device).type, enabled=False)


def native_bf16_cpu() -> bool:
    """Whether this CPU computes bfloat16 natively (oneDNN's check); without it bf16 autocast is
    emulated on the CPU: correct (the recurrent layers are fp32) but slower than fp32."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False


def autocast(precision, device) -> contextlib.AbstractContextManager:
    """The context to run a forward pass in: nothing for fp32, ``torch.autocast`` (bf16) for bf16."""
    name = getattr(precision, "value", precision)
    if name == "fp32":
        return contextlib.nullcontext()
    if name != "bf16":
        raise ValueError(f"precision must be fp32 or bf16, got {name!r}")
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
