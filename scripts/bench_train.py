"""Training data and throughput: the trajectory store vs the official layout; collection and
training speed, and where the time goes.

For CMA (latent, RGB + depth features) and MAP-CMA (depth features + egocentric maps), in one
run on the tiny synthetic benchmark:

1. **Collect** teacher-forcing episodes (the same episodes for every encoding) and report
   collection steps/s, twice in the same run: the frozen encoders per tick
   (``train.deferred_encoding=false``, the previous path) and deferred (each episode's frames
   in chunks of 64), with the ratio and the largest feature difference between the two stores
   (every other field must be identical).
2. **Bytes per stored step** of the toolkit's store (fp16 + zlib, fp16 raw, fp32 raw) against
   the official layout: per episode, msgpack of ``[observation map, prev_actions,
   oracle_actions]`` where the observation map holds every sensor as a (T, ...) array, the
   instruction repeated at every step, arrays encoded as msgpack-numpy does (a map with the
   raw bytes); fp32 as officially, and fp16 (the official option). The ratios say how much
   smaller the toolkit's store is; the content is the same (training reads the same numbers,
   up to the fp16 choice, which both layouts offer).
3. **Actions only** (``train.store_observations=false``): the same episodes stored as their
   actions (executed, expert label, previous), and the cost of getting the observations back:
   the round is replayed in the simulator (``replay_round``) and the re-rendered features and
   maps are compared with the collected ones (largest feature difference; maps, labels and
   progress must be identical), so the ratio is at numerically equivalent training data.
4. **Train** from the store: optimizer steps/s and timesteps/s at ``--batch`` episodes per
   batch, split into data loading + collate, forward, backward, optimizer; with
   ``--precision fp32,bf16`` once per precision from the same weights and batches, with the
   speed ratio and the largest relative gap between the two loss curves.

    python scripts/bench_train.py [--data data/synthetic_tiny] [--episodes 24] [--batch 5] [--steps 10] [--small]
                                  [--size 64] [--repeat 3] [--precision fp32,bf16]

5. With ``--sequence`` (and only then): the training step's whole-sequence forward against the
   per-step loop, timesteps/s and kernel launches or operator calls per optimizer step
   (``scripts/bench_train_sequence.py``, which takes the remaining options).
"""

from __future__ import annotations

import argparse
import shutil
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

if "--sequence" in sys.argv[1:]:  # numpy and torch only: runs on a bare GPU machine
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_train_sequence import main as sequence_main

    sys.exit(sequence_main(sys.argv[1:]))

from ivln_ce.benchmark.synthetic import build_synthetic  # noqa: E402
from ivln_ce.config import load_config  # noqa: E402


def msgpack_official(ep, fp16: bool) -> bytes:
    """One stored episode in the official LMDB value layout (msgpack + msgpack-numpy style)."""
    import msgpack

    def nd(a: np.ndarray) -> dict:
        a = np.ascontiguousarray(a)
        if fp16 and a.dtype == np.float32:
            a = a.astype(np.float16)
        return {b"nd": True, b"type": a.dtype.str.encode(), b"kind": b"", b"shape": list(a.shape), b"data": a.tobytes()}

    T = ep.length
    obs = {"instruction": nd(np.repeat(np.asarray(ep.constants["instruction"], np.int64)[None], T, 0)),
           "progress": nd(np.asarray(ep.steps["progress"], np.float32)),
           "not_done_masks": nd(np.concatenate([[0.0], np.ones(T - 1)]).astype(np.float32).reshape(T, 1))}
    for k in ("depth_features", "rgb_features"):
        if k in ep.steps:
            obs[k] = nd(np.asarray(ep.steps[k]).astype(np.float32))
    for k in ("occupancy_map", "semantic_map"):
        if k in ep.steps:
            obs[k] = nd(np.asarray(ep.steps[k]).astype(np.uint8))
    return msgpack.packb([obs, nd(np.asarray(ep.steps["prev_actions"], np.int64)),
                          nd(np.asarray(ep.steps["oracle_actions"], np.int64))], use_bin_type=True)


def _overrides(args, name: str, out: Path) -> list[str]:
    sensors = "[depth,semantic]" if name == "map_cma" else "[rgb,depth]"
    over = [f"data.root={args.data}", f"results_dir={out}", f"policy.name={name}", f"simulator.sensors={sensors}",
            "train.epochs=1", "train.max_steps=1", f"train.update_size={args.episodes}", "env.oracle_phases=false",
            "mapping.mode=episodic", "train.store_codec=raw", "train.store_fp16=false", f"train.num_envs={args.envs}",
            f"train.device={args.device}"]
    if args.small:
        over += ["policy.depth_backbone=small", "policy.rgb_depth=18"]
    if args.size:
        over += [f"simulator.{s}.{d}={args.size}" for s in ("rgb", "depth", "semantic") for d in ("width", "height")]
    return over


def collect(args, name: str, out: Path, deferred: bool = True) -> tuple[dict, float]:
    from ivln_ce.training.trainer import train

    t = time.perf_counter()
    over = _overrides(args, name, out) + [f"train.deferred_encoding={str(deferred).lower()}"]
    summary = train(load_config(None, over), show_progress=False)
    return summary, time.perf_counter() - t


def episodes_difference(ea: list, eb: list, what: str, relative: bool = False) -> tuple[float, bool]:
    """Largest feature difference between two lists of the same stored episodes (relative to
    the feature's scale when ``relative``), and whether every other field is identical."""
    if [e.meta for e in ea] != [e.meta for e in eb]:
        raise SystemExit(f"{what} stored other episodes")
    worst, identical = 0.0, True
    for x, y in zip(ea, eb):
        for k in x.steps:
            u, v = np.asarray(x.steps[k]), np.asarray(y.steps[k]).astype(np.float64)
            if k.endswith("_features"):
                scale = max(float(np.abs(v).max()), 1e-12) if relative else 1.0
                worst = max(worst, float(np.abs(u.astype(np.float64) - v).max()) / scale)
            else:
                identical &= bool(np.array_equal(u, np.asarray(y.steps[k])))
    return worst, identical


def stored_episodes(folder: Path) -> list:
    from ivln_ce.training.store import TrajectoryStore
    from ivln_ce.training.trainer import canonical_order

    store = TrajectoryStore(folder)
    return [store[i] for i in canonical_order(store)]


def actions_only(args, name: str, src: Path, tmp: Path) -> dict[str, float]:
    """Bytes per step of the collected episodes stored as actions only, the replay's speed and
    how far its re-rendered observations are from the collected ones."""
    from ivln_ce.models.factory import build_policy
    from ivln_ce.training.collect import ACTION_FIELDS, replay_round
    from ivln_ce.training.store import Episode, TrajectoryStore, TrajectoryWriter
    from ivln_ce.training.trainer import _pipeline, _round_plan, canonical_order, load_training_data

    store = TrajectoryStore(src)
    eps = [store[i] for i in canonical_order(store)]
    steps = sum(e.length for e in eps)
    with TrajectoryWriter(tmp / "actions", "s", codec="zlib") as w:
        for e in eps:
            w.append(Episode(dict(e.meta), dict(e.constants), {k: np.asarray(e.steps[k]).astype(np.int8) for k in ACTION_FIELDS}))
    size = sum(p.stat().st_size for p in (tmp / "actions").glob("*")) / steps
    cfg = load_config(None, _overrides(args, name, tmp / "unused"))
    data = load_training_data(cfg)
    items, plan, _ = _round_plan(cfg, data, 0, 0, 1)  # round 0 as the trainer planned it
    policy, _ = build_policy(cfg.policy, data.vocab_size, cfg.train, args.device, seed=int(cfg.seed))
    t = time.perf_counter()
    with TrajectoryWriter(tmp / "replayed", "s", fp16=False, codec="raw") as w:
        stats = replay_round(cfg, items, plan, data.references, data.scenes_dir, policy, _pipeline(cfg, policy, args.device),
                             TrajectoryStore(tmp / "actions"), w, 0, 1.0)
    secs = time.perf_counter() - t
    worst, identical = episodes_difference(eps, stored_episodes(tmp / "replayed"), "the replay")
    return {"bytes": size, "replay_steps_per_s": stats.steps / secs, "max_feature_diff": worst, "identical": identical}


def store_sizes(src: Path, tmp: Path) -> dict[str, float]:
    from ivln_ce.training.store import TrajectoryStore, TrajectoryWriter

    store = TrajectoryStore(src)
    eps = [store[i] for i in range(len(store))]
    steps = sum(e.length for e in eps)
    out = {}
    for label, fp16, codec in (("ivln_ce fp16+zlib", True, "zlib"), ("ivln_ce fp16 raw", True, "raw"), ("ivln_ce fp32 raw", False, "raw")):
        d = tmp / label.replace(" ", "_").replace("+", "_")
        with TrajectoryWriter(d, "s", fp16=fp16, codec=codec) as w:
            for e in eps:
                w.append(e)
        out[label] = sum(p.stat().st_size for p in d.glob("*")) / steps
    for fp16 in (False, True):
        out[f"official msgpack {'fp16' if fp16 else 'fp32'}"] = sum(len(msgpack_official(e, fp16)) for e in eps) / steps
    return out


def train_speed(args, name: str, store_dir: Path, precision: str = "fp32") -> dict[str, float]:
    """Optimizer steps from the store with a per-phase breakdown (single process, ``--device``),
    the forward pass in ``precision`` (fp32, or bf16 autocast as ``train.precision``); the same
    seeded initial weights and batches for every precision, so the losses are comparable."""
    from ivln_ce.models.factory import build_policy
    from ivln_ce.training.batching import bucketed_batches, collate
    from ivln_ce.training.store import TrajectoryStore
    from ivln_ce.models.precision import autocast
    from ivln_ce.training.trainer import batch_losses

    store = TrajectoryStore(store_dir)
    over = [f"policy.name={name}"] + (["policy.depth_backbone=small", "policy.rgb_depth=18"] if args.small else [])
    cfg = load_config(None, over + [f"data.root={args.data}"])
    from ivln_ce.data.episodes import load_episodes

    vocab = len(load_episodes(cfg.data.episodes.replace("{split}", "train")).vocab)
    policy, _ = build_policy(cfg.policy, vocab, cfg.train, device=args.device, seed=0)
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=2.5e-4)
    policy.train()
    cuda = args.device.startswith("cuda")

    def sync():
        if cuda:
            torch.cuda.synchronize()
    batches = bucketed_batches([store.steps(i) for i in range(len(store))], args.batch, 0, 0, 0)
    t = {"load+collate": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    timesteps = done = 0
    step_losses: list[float] = []
    import importlib.util

    sampler_spec = importlib.util.spec_from_file_location("gpu_sampler", Path(__file__).with_name("gpu_sampler.py"))
    gpu_sampler = importlib.util.module_from_spec(sampler_spec)
    sampler_spec.loader.exec_module(gpu_sampler)
    sampler = gpu_sampler.GPUSampler().__enter__() if cuda else None
    for n in range(args.steps):
        b = batches[n % len(batches)]
        t0 = time.perf_counter()
        batch = collate([store[i] for i in b]).to(args.device)
        sync()
        t1 = time.perf_counter()
        with autocast(precision, args.device):
            losses = batch_losses(policy, batch, 1.0 if name == "map_cma" else 0.0, len(b), int(batch.valid.sum()), 1)
        step_losses.append(float(losses["loss"]))
        sync()
        t2 = time.perf_counter()
        opt.zero_grad()
        losses["loss"].backward()
        sync()
        t3 = time.perf_counter()
        opt.step()
        sync()
        t4 = time.perf_counter()
        if n > 0:  # the first step warms up allocators
            for k, a, z in (("load+collate", t0, t1), ("forward", t1, t2), ("backward", t2, t3), ("optimizer", t3, t4)):
                t[k] += z - a
            timesteps += int(batch.valid.sum())
            done += 1
    total = sum(t.values())
    busy = None
    if sampler is not None:
        sampler.__exit__()
        busy = sampler.busy
    out = {"optimizer_steps_per_s": done / total, "timesteps_per_s": timesteps / total,
           **{f"{k} %": 100 * v / total for k, v in t.items()}, "losses": step_losses}
    if busy is not None:
        out["gpu busy %"] = 100 * busy
    return out


def act_speed(args, name: str, store_dir: Path, precision: str, max_steps: int = 200) -> dict[str, float]:
    """Evaluation-style policy steps (``PolicyAgent``'s ``policy.act`` at batch 1, as each CPU
    evaluation worker runs it) over stored episodes, in ``precision``: ms per step and the
    argmax actions, so two precisions can be compared step by step from the same weights."""
    from ivln_ce.models.cma import PolicyState
    from ivln_ce.models.factory import build_policy
    from ivln_ce.models.precision import autocast
    from ivln_ce.training.store import TrajectoryStore

    store = TrajectoryStore(store_dir)
    over = [f"policy.name={name}"] + (["policy.depth_backbone=small", "policy.rgb_depth=18"] if args.small else [])
    cfg = load_config(None, over + [f"data.root={args.data}"])
    from ivln_ce.data.episodes import load_episodes

    vocab = len(load_episodes(cfg.data.episodes.replace("{split}", "train")).vocab)
    policy, _ = build_policy(cfg.policy, vocab, cfg.train, device="cpu", seed=0)
    policy.eval()
    actions, secs, steps = [], 0.0, 0
    with torch.no_grad():
        for i in range(len(store)):
            ep, state = store[i], PolicyState()
            for t in range(ep.length):
                obs = {"instruction": torch.as_tensor(np.asarray(ep.constants["instruction"]))[None]}
                for k in ("depth_features", "rgb_features", "occupancy_map", "semantic_map"):
                    if k in ep.steps:
                        a = np.asarray(ep.steps[k][t])
                        obs[k] = torch.as_tensor(a.astype(np.float32) if a.dtype == np.float16 else a)[None]
                start = torch.tensor([t == 0])
                t0 = time.perf_counter()
                with autocast(precision, "cpu"):
                    a, _, state = policy.act(obs, state, ["s"], start, torch.tensor([i == 0 and t == 0]))
                state.record_actions(["s"], [int(ep.steps["prev_actions"][t + 1]) if t + 1 < ep.length else 0])
                if steps > 0:  # the first step warms up allocators
                    secs += time.perf_counter() - t0
                actions.append(int(a[0]))
                steps += 1
                if steps >= max_steps:
                    return {"ms_per_step": 1e3 * secs / (steps - 1), "actions": actions}
    return {"ms_per_step": 1e3 * secs / max(steps - 1, 1), "actions": actions}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/synthetic_tiny")
    ap.add_argument("--models", default="cma,map_cma")
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--envs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--small", action="store_true", help="small depth CNN and ResNet-18 RGB trunk")
    ap.add_argument("--repeat", type=int, default=1, help="collect this many times per encoding path, alternating")
    ap.add_argument("--size", type=int, default=0, help="square frames of this many pixels (0: the defaults, "
                    "256 px depth and 224 px RGB; the embedded recipes use 64)")
    ap.add_argument("--device", default="cpu", help="where the training steps run (collection follows it)")
    ap.add_argument("--precision", default="fp32",
                    help="comma-separated forward precisions to time, each from the same weights (fp32, bf16)")
    args = ap.parse_args(argv)
    build_synthetic("tiny", args.data, progress=False)
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {'small encoders' if args.small else 'official encoders (DD-PPO ResNet-50, RGB ResNet-50)'}, "
          f"{f'{args.size} px frames' if args.size else 'default frame sizes'}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in args.models.split(","):
            rates: dict[bool, list[float]] = {False: [], True: []}
            for rep_ in range(args.repeat):  # alternating which path goes first
                for deferred in ((False, True) if rep_ % 2 == 0 else (True, False)):
                    folder = tmp / (name if deferred else f"{name}_tick")
                    shutil.rmtree(folder, ignore_errors=True)
                    summary_, secs_ = collect(args, name, folder, deferred=deferred)
                    rates[deferred].append(summary_["collections"][0]["env_steps_per_s"])
                    if deferred:
                        summary, secs = summary_, secs_
            print(f"\n{name}: collected {summary['episodes_collected']} episodes, {summary['steps_collected']} steps "
                  f"in {secs:.1f} s (start-up included) -> {summary['steps_collected'] / secs:.1f} steps/s")
            a, b = (sorted(rates[d]) for d in (False, True))
            worst, same = episodes_difference(stored_episodes(tmp / name / "store"),
                                              stored_episodes(tmp / f"{name}_tick" / "store"), "the two collections", relative=True)
            spread = lambda r: f"{r[0]:.1f} / {r[len(r) // 2]:.1f} / {r[-1]:.1f}"
            print(f"  collection (workers started; min / median / max of {args.repeat}, alternating): encoders per tick "
                  f"{spread(a)} steps/s, deferred {spread(b)} steps/s ({b[len(b) // 2] / a[len(a) // 2]:.2f}x of the "
                  f"medians, same run); deferred vs per tick: largest feature difference {worst:.2g} of its scale, "
                  f"actions/labels/maps/progress {'identical' if same else 'DIFFERENT'}")
            sizes = store_sizes(tmp / name / "store", tmp / f"{name}_sizes")
            official = sizes["official msgpack fp32"]
            print("  bytes per stored step (ratio: official fp32 / this):")
            for k, v in sizes.items():
                print(f"    {k:>24}: {v:10.0f} B/step   {official / v:6.2f}x smaller than official fp32, "
                      f"{sizes['official msgpack fp16'] / v:6.2f}x than official fp16")
            act = actions_only(args, name, tmp / name / "store", tmp / f"{name}_actions")
            print(f"    {'ivln_ce actions only':>24}: {act['bytes']:10.0f} B/step   {official / act['bytes']:6.2f}x smaller than "
                  f"official fp32, {sizes['official msgpack fp16'] / act['bytes']:6.2f}x than official fp16")
            print(f"  replaying the actions re-renders {act['replay_steps_per_s']:.1f} steps/s; re-rendered vs collected: "
                  f"largest feature difference {act['max_feature_diff']:.3g}, maps/labels/progress "
                  f"{'identical' if act['identical'] else 'DIFFERENT'}")
            speeds = {}
            for precision in args.precision.split(","):
                speed = speeds[precision] = train_speed(args, name, tmp / name / "store", precision)
                print(f"  training from the store (batch {args.batch}, {precision}): {speed['optimizer_steps_per_s']:.2f} "
                      f"optimizer steps/s, {speed['timesteps_per_s']:.1f} timesteps/s; time: " +
                      ", ".join(f"{k[:-2]} {v:.0f}%" for k, v in speed.items() if k.endswith("%") and not k.startswith("gpu"))
                      + (f"; GPU busy {speed['gpu busy %']:.0f}% of the time" if "gpu busy %" in speed else ""))
            acts = {}
            for precision in args.precision.split(","):
                acts[precision] = act_speed(args, name, tmp / name / "store", precision)
                print(f"  evaluation policy step (batch 1, {precision}): {acts[precision]['ms_per_step']:.2f} ms")
            if "fp32" in acts and "bf16" in acts:
                a, b = acts["fp32"], acts["bf16"]
                same = np.mean(np.array(a["actions"]) == np.array(b["actions"]))
                print(f"  bf16 / fp32 evaluation step speed: {a['ms_per_step'] / b['ms_per_step']:.2f}x (same run); "
                      f"argmax actions equal at {same:.1%} of {len(a['actions'])} steps (seeded untrained weights)")
            if "fp32" in speeds and "bf16" in speeds:
                a, b = speeds["fp32"], speeds["bf16"]
                gap = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a["losses"], b["losses"]))
                print(f"  bf16 / fp32 training speed: {b['optimizer_steps_per_s'] / a['optimizer_steps_per_s']:.2f}x "
                      f"(same run); losses over {len(a['losses'])} steps from the same weights: largest relative "
                      f"difference {gap:.2%} (first {a['losses'][0]:.4f} vs {b['losses'][0]:.4f}, last "
                      f"{a['losses'][-1]:.4f} vs {b['losses'][-1]:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
