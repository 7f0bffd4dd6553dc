"""Training on a CUDA device: one training step (losses, gradients, Adam update, BatchNorm
statistics) equals the CPU step within float tolerance, and a one-rank nccl process group
initialises and all-reduces (through the project's collectives). Skipped without CUDA."""

import copy
import os
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: torch.cuda.is_available() is False")]

LR = 2.5e-4


def _episodes(lengths, rgb: bool, seed=0):
    """Store episodes as the trainer reads them (frozen-encoder features, maps, labels)."""
    from ivln_ce.training.store import Episode

    rng = np.random.default_rng(seed)
    eps = []
    for k, T in enumerate(lengths):
        arrays = {"depth_features": rng.random((T, 128, 4, 4)).astype(np.float32),
                  "oracle_actions": rng.integers(0, 4, T), "prev_actions": rng.integers(-1, 4, T),
                  "progress": rng.random((T, 1)).astype(np.float32)}
        if rgb:
            arrays["rgb_features"] = rng.random((T, 512, 4, 4)).astype(np.float32)
        else:
            arrays["occupancy_map"] = (rng.random((T, 64, 64)) < 0.2).astype(np.uint8)
            arrays["semantic_map"] = rng.integers(0, 13, (T, 64, 64)).astype(np.uint8)
        eps.append(Episode({"episode_id": str(k), "steps": T}, {"instruction": rng.integers(1, 50, 12)}, arrays))
    return eps


def _policy(name):
    from ivln_ce.models.cma import CMAPolicy
    from ivln_ce.models.map_cma import MapCMAPolicy

    torch.manual_seed(0)
    if name == "map_cma":
        return MapCMAPolicy(50, None, "small")
    return CMAPolicy(name.replace("_", ""), 50, None, "small", 18)


def _step(policy, batch, n, valid):
    """One optimizer step as ``trainer._train_episodic_epoch`` takes it (one rank)."""
    from ivln_ce.training.trainer import batch_losses

    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=LR)
    policy.train()
    losses = batch_losses(policy, batch, progress_weight=1.0, global_episodes=n, global_valid=valid, world=1)
    opt.zero_grad(set_to_none=True)
    losses["loss"].backward()
    grads = [p.grad.detach().cpu().clone() for p in params]
    opt.step()
    return {k: float(v.detach()) for k, v in losses.items()}, grads, {k: v.detach().cpu().clone() for k, v in policy.state_dict().items()}


@pytest.mark.parametrize("name", ["map_cma", "cma", "tour_cma"])
def test_a_training_step_on_cuda_equals_the_cpu_step(cuda_exact, name):
    from ivln_ce.training.trainer import _StoreDataset, collate_padded, rank_batches

    lengths = [5, 3, 7, 4]
    episodes = _episodes(lengths, rgb=name != "map_cma")
    order = list(range(len(episodes)))
    (keys,) = rank_batches([order], lengths, 0, 1)
    dataset = _StoreDataset(episodes, order)
    batch = collate_padded([dataset[k] for k in keys], 3.2)
    cpu = _policy(name)
    gpu = copy.deepcopy(cpu).to(cuda_exact)
    assert next(gpu.parameters()).device.type == "cuda"
    on_gpu = batch.to(cuda_exact)
    loss_c, grads_c, state_c = _step(cpu, batch, len(lengths), sum(lengths))
    loss_g, grads_g, state_g = _step(gpu, on_gpu, len(lengths), sum(lengths))
    for k in ("loss", "action_loss", "progress_loss", "correct", "valid"):
        assert loss_g[k] == pytest.approx(loss_c[k], rel=1e-5, abs=1e-6), k
    gc = torch.cat([g.flatten() for g in grads_c])
    gg = torch.cat([g.flatten() for g in grads_g])
    assert float(gc.norm()) > 0
    assert float((gc - gg).norm()) <= 1e-4 * float(gc.norm())
    # per tensor: relative to its own gradient, with a float32 noise floor relative to the whole
    # gradient (a bias feeding a BatchNorm has an analytically zero gradient: on the H200 its CPU
    # value was 9e-6 of noise against 1e-8 on cuda, with a whole-gradient norm of 5.4)
    for a, b in zip(grads_c, grads_g):
        assert float((a - b).norm()) <= 1e-3 * float(a.norm()) + 1e-5 * float(gc.norm())
    assert state_c.keys() == state_g.keys()
    moved = 0
    for k, a in state_c.items():
        b = state_g[k]
        if not a.is_floating_point():
            assert torch.equal(a, b), k  # e.g. BatchNorm's num_batches_tracked
            continue
        if "running" in k:
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), k
            continue
        # Adam's first step moves an element by about lr * sign(gradient): an element whose
        # gradient is float noise may step the other way (at most 2 lr apart), nothing more
        d = (a - b).abs()
        assert float(d.max()) <= 2 * LR + 1e-6, k
        moved += int((d > 1e-6).sum())
    total = sum(v.numel() for v in state_c.values() if v.is_floating_point())
    assert moved <= 0.01 * total


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nccl_rank(rank, port, out):
    import torch.distributed as dist

    from ivln_ce.training import distributed as ddp

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=1)
    try:
        x = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3)
        y = x.clone()
        dist.all_reduce(y)  # the sum over one rank is the tensor itself
        # the project's differentiable all-reduce (GlobalBatchNorm2d's collective) on nccl
        w = torch.ones(3, device="cuda", requires_grad=True)
        s = ddp.allreduce_sum(x * w)
        s.sum().backward()
        gathered = [torch.empty_like(x)]
        dist.all_gather(gathered, x)
        dist.barrier()
        torch.cuda.synchronize()
        torch.save({"backend": dist.get_backend(), "world": dist.get_world_size(), "y": y.cpu(), "s": s.detach().cpu(),
                    "grad": w.grad.cpu(), "gathered": gathered[0].cpu(), "device": str(y.device)}, out)
    finally:
        dist.destroy_process_group()


def test_a_one_rank_nccl_group_initialises_and_all_reduces(tmp_path):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("this torch build has no nccl backend")
    mp = pytest.importorskip("torch.multiprocessing")
    out = tmp_path / "nccl.pt"
    mp.spawn(_nccl_rank, args=(_free_port(), out), nprocs=1, join=True)  # a fresh process: CUDA and the group die with it
    r = torch.load(out)
    assert r["backend"] == "nccl" and r["world"] == 1 and r["device"].startswith("cuda")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert torch.equal(r["y"], x) and torch.equal(r["s"], x)
    assert torch.equal(r["grad"], x.sum(0))  # d/dw of sum(x * w) through the all-reduce's backward
    assert torch.equal(r["gathered"], x)
