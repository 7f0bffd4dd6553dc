"""The training step's forward: whole sequence against the per-step loop, in one run.

Times one optimizer step (forward, the training losses, backward, Adam) of CMA and MAP-CMA on
collated batches of B episodes whose lengths are drawn from [T/2, T] (so batches are padded as
real ones are), for each ``train.sequence_forward`` (``whole``, ``step``) and precision, from
the same weights and batches; reports valid timesteps/s, ms per step, and the work dispatched
per step: CUDA kernel launches on a GPU, operator calls on a CPU (every event of
``torch.profiler``). Before timing it checks that the two forwards agree on the first batch
(largest relative difference of the logits, and of the gradients' norms).

It needs only numpy and torch (no simulator, no config), so it runs on a bare GPU machine:

    python scripts/bench_train.py --sequence [--device cuda] [--models cma,map_cma] [--batches 8,64]
                                  [--lengths 40,105] [--precision fp32,bf16] [--steps 8] [--warmup 2]
                                  [--modes whole,whole-cl,step]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch
import torch.nn.functional as F

from ivln_ce.models.cma import CMAPolicy
from ivln_ce.models.map_cma import MapCMAPolicy
from ivln_ce.models.precision import autocast
from ivln_ce.training.batching import collate
from ivln_ce.training.store import Episode

VOCAB = 2504


def episodes(model: str, batch: int, longest: int, seed: int) -> list[Episode]:
    """Stored-episode stand-ins of the shapes the store holds (fp16 features, uint8 maps)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(max(longest // 2, 1), longest + 1, batch)
    lengths[0] = longest
    out = []
    for k, T in enumerate(lengths):
        steps = {"depth_features": rng.random((T, 128, 4, 4)).astype(np.float16),
                 "oracle_actions": rng.integers(0, 4, T), "prev_actions": np.r_[-1, rng.integers(0, 4, T - 1)],
                 "progress": rng.random((T, 1)).astype(np.float32)}
        if model == "map_cma":
            steps["occupancy_map"] = (rng.random((T, 64, 64)) < 0.3).astype(np.uint8)
            steps["semantic_map"] = rng.integers(0, 13, (T, 64, 64)).astype(np.uint8)
        else:
            steps["rgb_features"] = rng.random((T, 2048, 4, 4)).astype(np.float16)
        out.append(Episode({"episode_id": str(k), "steps": int(T)}, {"instruction": rng.integers(1, VOCAB, 80)}, steps))
    return out


def make_policy(model: str, device: str) -> CMAPolicy:
    torch.manual_seed(0)
    policy = MapCMAPolicy(VOCAB) if model == "map_cma" else CMAPolicy("cma", VOCAB)
    return policy.to(device).train()


def losses(policy, batch, mode: str) -> torch.Tensor:
    """The teacher-forcing loss of ``trainer.batch_losses`` (one process): inflection-weighted
    cross entropy per episode, mean over episodes, plus the progress MSE over valid steps."""
    logits, progress, _ = policy.forward_sequence(batch.observations, batch.prev_actions, batch.masks, batch.masks, mode=mode)
    logits, progress = logits.float(), progress.float()
    ce = F.cross_entropy(logits.flatten(0, 1), batch.expert.flatten(), reduction="none").view_as(batch.weights)
    action = ((ce * batch.weights).sum(0) / batch.weights.sum(0).clamp(min=1e-9)).mean()
    v = batch.valid
    return action + ((progress[v] - batch.progress[v]) ** 2).mean()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def agreement(model: str, batch, device: str) -> tuple[float, float]:
    """Largest relative logit difference and largest relative gradient-norm difference, whole vs step."""
    out = {}
    for mode in ("whole", "step"):
        policy = make_policy(model, device)
        loss = losses(policy, batch, mode)
        loss.backward()
        with torch.no_grad():
            logits = policy.forward_sequence(batch.observations, batch.prev_actions, batch.masks, batch.masks, mode=mode)[0]
        out[mode] = (logits, {n: p.grad for n, p in policy.named_parameters() if p.grad is not None})
    (la, ga), (lb, gb) = out["whole"], out["step"]
    logit = float((la - lb).abs().max() / lb.abs().max())
    grad = max(float((ga[n] - gb[n]).norm() / gb[n].norm().clamp(min=1e-30)) for n in gb
               if not (n == "net.text_k.bias" or n.endswith(".conv.0.bias")))  # exactly 0 in theory: rounding only
    return logit, grad


def time_steps(model: str, batch, mode: str, precision: str, device: str, steps: int, warmup: int) -> dict:
    """``mode``: whole, step, or whole-cl (whole, MAP-CMA's map encoder on channels-last inputs:
    ``train.channels_last``)."""
    policy = make_policy(model, device)
    if mode == "whole-cl":
        from ivln_ce.models.encoders import use_channels_last

        use_channels_last(policy, True)
        mode = "whole"
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast(precision, device):
            loss = losses(policy, batch, mode)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    sync(device)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t0)
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        step()
        sync(device)
    events = prof.events()
    if device.startswith("cuda"):
        work = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
        busy = sum(e.device_time for e in events if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3  # ms
    else:
        work, busy = len(events), float("nan")
    ms = 1e3 * float(np.median(times))
    return {"ms": ms, "timesteps_per_s": int(batch.valid.sum()) / (ms / 1e3), "work": work, "busy_ms": busy}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequence", action="store_true", help="(the flag bench_train.py dispatches on)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default="cma,map_cma")
    ap.add_argument("--batches", default="8,64", help="episodes per batch, comma-separated")
    ap.add_argument("--lengths", default="40,105", help="longest episode of a batch (others drawn from [T/2, T])")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--modes", default="whole,step", help="whole, step, whole-cl (whole with train.channels_last; CUDA)")
    ap.add_argument("--steps", type=int, default=8, help="timed optimizer steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)
    dev = args.device
    name = torch.cuda.get_device_name(dev) if dev.startswith("cuda") else platform.processor() or platform.machine()
    print(f"device: {dev} ({name}); torch {torch.__version__}; {os.cpu_count()} cores, {torch.get_num_threads()} threads")
    unit = "kernels" if dev.startswith("cuda") else "op calls"
    print(f"| model | B | T max | valid steps | precision | mode | ms/step | valid timesteps/s | {unit}/step | GPU busy ms | whole/step speed | whole/step {unit} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        for B in map(int, args.batches.split(",")):
            for T in map(int, args.lengths.split(",")):
                batch = collate(episodes(model, B, T, seed=B * 1000 + T)).to(dev)
                logit, grad = agreement(model, batch, dev)
                print(f"<!-- {model} B={B} T={T}: whole vs step, fp32: logits {logit:.2e}, gradients {grad:.2e} (largest relative) -->")
                for precision in args.precision.split(","):
                    res = {m: time_steps(model, batch, m, precision, dev, args.steps, args.warmup) for m in args.modes.split(",")}
                    for m, r in res.items():
                        ratio = ratio_work = ""
                        if m.startswith("whole") and "step" in res:
                            ratio = f"{r['timesteps_per_s'] / res['step']['timesteps_per_s']:.2f}x"
                            ratio_work = f"{r['work'] / res['step']['work']:.3f}"
                        print(f"| {model} | {B} | {T} | {int(batch.valid.sum())} | {precision} | {m} | {r['ms']:.1f} | "
                              f"{r['timesteps_per_s']:.0f} | {r['work']} | {r['busy_ms']:.1f} | {ratio} | {ratio_work} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
