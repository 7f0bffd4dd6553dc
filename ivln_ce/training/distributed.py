"""Data-parallel training over torchrun ranks, exact with respect to the global batch.

Each rank trains on its slice of every global batch. ``allreduce_gradients`` averages the
gradients after backward in one flattened all-reduce (the same collective order on every
rank, gloo or nccl). BatchNorm layers that train (MAP-CMA's map encoder) would otherwise
normalise with their rank's slice only, so a 2-rank run would compute another function
than a 1-rank run: ``sync_batchnorm`` swaps them for ``GlobalBatchNorm2d``, which reduces the
batch sums across ranks with a differentiable all-reduce (torch's SyncBatchNorm needs CUDA;
this one runs on gloo too) and so reproduces the single-process statistics and gradients to
float tolerance.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn


def world() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment, or (0, 1, 0)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def init_from_env(device: str) -> tuple[int, int]:
    """Initialise the process group under torchrun (nccl on CUDA, gloo on CPU)."""
    rank, size, local = world()
    if size > 1 and not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") and os.environ.get("IVLN_DIST_BACKEND", "") != "gloo" else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=size)
        if backend == "nccl":
            torch.cuda.set_device(local % torch.cuda.device_count())
    return rank, size


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def gather_cat(t: torch.Tensor) -> torch.Tensor:
    """Every rank's ``t`` (same shape on every rank) concatenated along dim 0 in rank order
    (``t`` itself on one rank)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return t
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts)


def sum_over_ranks(t: torch.Tensor) -> torch.Tensor:
    """The sum of ``t`` over ranks (a copy; ``t`` itself on one rank). Not differentiable."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return t
    out = t.detach().clone()
    dist.all_reduce(out)
    return out


def allreduce_gradients(params) -> None:
    """Average the gradients of ``params`` across ranks (no-op on one rank)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    params = list(params)
    if not params:
        return
    # every rank must reduce the same list: a parameter with a gradient on any rank gets a zero
    # gradient where it has none (a rank without data this step, a head unused on this slice);
    # one that has none anywhere stays None, so the optimizer skips it as in one process
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=params[0].device)
    dist.all_reduce(has, op=dist.ReduceOp.MAX)
    grads = []
    for p, h in zip(params, has.tolist()):
        if h:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n


class _AllReduceSum(torch.autograd.Function):
    """y = sum over ranks of x; the gradient of a sum is the sum of the ranks' gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        g = grad.clone()
        dist.all_reduce(g)
        return g


def allreduce_sum(t: torch.Tensor) -> torch.Tensor:
    """A differentiable all-reduce (sum) across ranks."""
    return _AllReduceSum.apply(t)


class GlobalBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training statistics cover the whole global batch across ranks.

    ``global_stats`` is switched off (``local_statistics``) while collecting: under T3 the
    collection forward runs in train mode, the ranks' engines tick independently, and the
    official statistics are those of one process's workers."""

    global_stats: bool = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and self.global_stats and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        c = x.shape[1]
        local_n = torch.tensor([x.numel() / c], dtype=x.dtype, device=x.device)
        total = allreduce_sum(torch.cat([x.sum(dim=(0, 2, 3)), local_n]))
        n = total[-1]
        mean = total[:c] / n
        # two passes, as BatchNorm computes it: the squared deviations from the global mean
        var = allreduce_sum(((x - mean[None, :, None, None]) ** 2).sum(dim=(0, 2, 3))) / n
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                self.running_mean.mul_(1 - m).add_(m * mean.detach())
                self.running_var.mul_(1 - m).add_(m * var.detach() * n / (n - 1).clamp(min=1))
        y = (x - mean[None, :, None, None]) / torch.sqrt(var[None, :, None, None] + self.eps)
        if self.affine:
            y = y * self.weight[None, :, None, None] + self.bias[None, :, None, None]
        return y


@contextmanager
def local_statistics(module: nn.Module):
    """Inside: every ``GlobalBatchNorm2d`` of ``module`` normalises with this rank's batch only
    and calls no collective (collection, where ranks do not step together)."""
    norms = [m for m in module.modules() if isinstance(m, GlobalBatchNorm2d)]
    for m in norms:
        m.global_stats = False
    try:
        yield module
    finally:
        for m in norms:
            m.global_stats = True


def sync_batchnorm(module: nn.Module) -> nn.Module:
    """Replace every trainable ``nn.BatchNorm2d`` by a ``GlobalBatchNorm2d`` with the same state."""
    for name, child in list(module.named_children()):
        if type(child) is nn.BatchNorm2d and any(p.requires_grad for p in child.parameters()):
            new = GlobalBatchNorm2d(child.num_features, child.eps, child.momentum, child.affine, child.track_running_stats)
            new.load_state_dict(child.state_dict())
            new.to(next(child.parameters()).device if any(True for _ in child.parameters()) else "cpu")
            setattr(module, name, new)
        else:
            sync_batchnorm(child)
    return module
