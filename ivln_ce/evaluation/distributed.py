"""torch.distributed set-up for ``torchrun`` evaluation (gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def init(rank: int, world_size: int, init_method: str | None = None) -> None:
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() and os.environ.get("IVLN_DIST_BACKEND", "") != "gloo" else "gloo"
    if init_method is None and "MASTER_ADDR" not in os.environ:
        raise RuntimeError("torch.distributed needs MASTER_ADDR/MASTER_PORT (start with torchrun) or an init_method")
    dist.init_process_group(backend, rank=rank, world_size=world_size, init_method=init_method)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())


@contextmanager
def process_group(rank: int, world_size: int) -> Iterator[None]:
    """The ranks joined for one evaluation, and the group destroyed on the way out when this call
    created it (a caller's own group is left alone). A process that exits with the group alive
    can die of SIGABRT after its work is done ("terminate called without an active exception":
    gloo's threads meet the interpreter's exit), which fails torchrun and multiprocessing runs
    that computed everything."""
    import torch.distributed as dist

    created = not dist.is_initialized()
    init(rank, world_size)
    ok = False
    try:
        yield
        ok = True
    finally:
        if created and dist.is_initialized():
            if ok:
                dist.barrier()  # every rank leaves together: no rank tears down while another still talks
            dist.destroy_process_group()


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


def from_rank0(value):
    """``value`` as rank 0 has it (a plain list or flag), on every rank; unchanged when no
    process group is running."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def to_rank0(value) -> list | None:
    """Every rank's ``value`` (plain data), in rank order, on rank 0; None on the other ranks.
    ``[value]`` when no process group is running."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return [value]
    rank = dist.get_rank()
    box = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(value, box, dst=0)
    return box
