"""Policy-evaluation throughput: the rollout engine vs one environment and one policy per process.

For MAP-CMA (GT semantics, iterative maps) and CMA, in the same run:

* **engine, K envs**: ``ivln-ce eval`` with ``eval.num_envs=K`` — K worker processes render and
  step, the main process runs the mapper, the frozen encoders and one batched policy step per
  tick;
* **baseline, P processes**: the previous evaluator's layout — each process owns one
  environment and its own copy of the policy and acts at batch 1 on its share of the tours.

Steps/s count every environment step (agent and oracle), in steady state: start-up (spawning
processes, imports, building policies) is excluded on both sides. The policy is a fixed untrained
network whose action head is biased to walk forward, so every episode runs
``--agent-steps`` policy steps before the step limit ends it (random policies would stop at
once and measure nothing but oracle walks). Prints steps/s, the speed-up over K = 1, scaling
efficiency (speed-up / K), the engine's per-step latency breakdown, and the ratio to the
baseline at the same process count.

* **engine layouts** (``--layouts K:M:G,...``): K environments, M per worker process, G worker
  groups taken in turn (``eval.envs_per_worker``, ``eval.groups``); each is compared with today's
  layout at the same K (K:1:1, one environment per process, lockstep), measured in the same run.
* **collection** (``--collect K:M:G,...``): teacher-forcing collection of one DAgger round
  (``ivln-ce train``'s first round, its ``collections`` record: steps/s of ``collect_round``)
  for each layout, against K:1:1 in the same run.

    python scripts/bench_rollout.py [--data data/synthetic_tiny] [--models map_cma,cma] [--envs 1,2,4,8]
        [--baseline 1,2] [--layouts 2:1:2,4:2:2] [--collect 2:1:1,2:1:2] [--size 256] [--small]
        [--device cpu|cuda] [--tours 0,1,2,3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/gpu_sampler.py

from ivln_ce.benchmark.synthetic import build_synthetic  # noqa: E402
from ivln_ce.config import load_config  # noqa: E402


def model_overrides(name: str, size: int, small: bool) -> list[str]:
    sensors = "[depth,semantic]" if name == "map_cma" else "[rgb,depth]"
    out = [f"policy.name={name}", f"simulator.sensors={sensors}", "mapping.mode=iterative", "mapping.semantics=gt"]
    out += [f"simulator.{s}.{d}={size}" for s in ("depth", "semantic") for d in ("width", "height")]
    out += [f"simulator.rgb.{d}={min(size, 224)}" for d in ("width", "height")]
    if small:
        out += ["policy.depth_backbone=small", "policy.rgb_depth=18"]
    return out


def make_checkpoint(cfg, path: Path, vocab: int) -> Path:
    from ivln_ce.models.factory import build_policy, save_checkpoint

    policy, _ = build_policy(cfg.policy, vocab, cfg.train, seed=0)
    with torch.no_grad():
        policy.action_distribution.linear.weight.zero_()
        policy.action_distribution.linear.bias.copy_(torch.tensor([0.0, 3.0, 0.0, 0.0]))
    return save_checkpoint(path, policy, {"policy": {"name": cfg.policy.name.value}})


def parse_layouts(text: str) -> list[tuple[int, int, int]]:
    """``K:M:G,...`` -> [(environments, per worker process, groups)]; ``K`` alone is K:1:1."""
    out = []
    for part in filter(None, text.split(",")):
        k, m, g = (list(map(int, part.split(":"))) + [1, 1])[:3]
        if min(k, m, g) < 1:
            raise SystemExit(f"bad layout {part!r}: K, M and G must be >= 1")
        out.append((k, m, g))
    return out


def layout_name(k: int, m: int, g: int) -> str:
    return f"K={k}" if (m, g) == (1, 1) else f"K={k} M={m} G={g}"


def run_engine(base: list[str], k: int, out: Path, device: str, per_worker: int = 1, groups: int = 1) -> dict:
    from gpu_sampler import GPUSampler

    from ivln_ce.evaluation.evaluator import evaluate

    cfg = load_config(None, base + [f"eval.num_envs={k}", f"results_dir={out}", "eval.resume=false", f"eval.device={device}",
                                    f"eval.envs_per_worker={per_worker}", f"eval.groups={groups}", "eval.policy_process=main"])
    t = time.perf_counter()
    with GPUSampler() if device.startswith("cuda") else _Null() as sampler:
        summary = evaluate(cfg, show_progress=False)
    total = time.perf_counter() - t
    lat = summary["latency"]
    # steady state: the engine's loop without starting the workers (the baseline is timed the same way)
    return {"steps": summary["steps"], "wall": lat["wall_s"] - lat["start_s"], "total": total, "latency": lat,
            "gpu_busy": getattr(sampler, "busy", None), "run": summary.get("run")}


def run_collection(base: list[str], k: int, out: Path, device: str, per_worker: int, groups: int, tours: int) -> dict:
    """One teacher-forcing round (beta 1: the expert acts, the policy is not run) of ``tours``
    tours; its ``collections`` record is the collection alone (no training)."""
    from gpu_sampler import GPUSampler

    from ivln_ce.training.trainer import train

    cfg = load_config(None, base + [f"train.out_dir={out}", f"train.num_envs={k}", f"train.envs_per_worker={per_worker}",
                                    f"train.groups={groups}", f"train.device={device}", f"train.update_size={tours}", "train.epochs=1",
                                    "train.batch_size=1", "train.max_steps=1", "train.eval_splits=[]"])
    with GPUSampler() if device.startswith("cuda") else _Null() as sampler:
        summary = train(cfg, show_progress=False)
    c = summary["collections"][0]
    # steady state, as for the engine: every environment step, without starting the workers
    return {"steps": c["env_steps"], "wall": c["wall_s"] - c["start_s"], "total": c["wall_s"], "gpu_busy": getattr(sampler, "busy", None),
            "record": c}


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def _baseline_worker(base: list[str], tours: list[int], device: str, queue) -> None:
    """One environment and one batch-1 policy in this process (the previous layout)."""
    torch.set_num_threads(1)
    from ivln_ce.env.tour_env import TourEnv
    from ivln_ce.evaluation.evaluator import load_split
    from ivln_ce.rollout.streams import StreamView
    from ivln_ce.rollout.observations import ObservationPipeline
    from ivln_ce.rollout.policy_agent import PolicyAgent
    from ivln_ce.sim import make_simulator

    cfg = load_config(None, base + [f"eval.device={device}"])
    split = load_split(cfg)
    agent = PolicyAgent.from_config(cfg, split.vocab_size, device=device)
    keys = sorted({"depth"} | ({"semantic12"} if agent.uses_maps else {"rgb"}))
    pipe = ObservationPipeline(device, mapper=agent.mapper, image_keys=keys, depth_encoder=agent.depth_encoder, rgb_encoder=agent.rgb_encoder)
    sim = make_simulator(cfg.simulator)
    env = TourEnv(sim, split.items, cfg.env, split.references, split.scenes_dir, success_distance=cfg.metrics.success_distance)
    steps = 0
    t0 = time.perf_counter()
    for n, k in enumerate(tours):
        obs, info = env.reset(options={"tour": k})
        stream = f"b{n}:{split.items[k].tour.tour_id}"
        done = False
        while not done:
            view = StreamView(stream, 0, k, split.items[k].tour.tour_id, split.items[k].tour.scan, obs, info)
            batch = pipe([view], agent.rows([view]))
            action = agent.act([view], batch)[0]
            obs, _, done, _, info = env.step(action)
            steps += 1
        agent.drop(stream)
        pipe.drop(stream)
    loop = time.perf_counter() - t0
    sim.close()
    queue.put((steps, loop))


def run_baseline(base: list[str], procs: int, tours: list[int], device: str) -> dict:
    from ivln_ce.evaluation.evaluator import load_split, shard

    split = load_split(load_config(None, base))
    shares = [s for s in shard(split.items, tours, procs) if s]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    t = time.perf_counter()
    ps = [ctx.Process(target=_baseline_worker, args=(base, s, device, queue)) for s in shares]
    for p in ps:
        p.start()
    got = [queue.get() for _ in ps]
    for p in ps:
        p.join()
    # steady state: the slowest process's loop (start-up excluded, as for the engine)
    return {"steps": sum(g[0] for g in got), "wall": max(g[1] for g in got), "total": time.perf_counter() - t}


def compare_layouts(kind: str, name: str, base: list[str], layouts: list[tuple[int, int, int]], tmp: Path, args) -> dict:
    """Each layout against today's (K:1:1) at the same K, measured alternately in this run."""
    import statistics

    todo = sorted(set(layouts) | {(k, 1, 1) for k, _, _ in layouts})
    rates: dict[tuple, list[float]] = {lay: [] for lay in todo}
    last: dict[tuple, dict] = {}
    for rep in range(args.repeat):
        for lay in todo:
            k, m, g = lay
            out = tmp / f"{name}_{kind}_{k}_{m}_{g}_{rep}"
            if kind == "engine":
                r = run_engine(base, k, out, args.device, m, g)
            else:
                r = run_collection(base, k, out, args.device, m, g, args.collect_tours)
            rates[lay].append(r["steps"] / r["wall"])
            last[lay] = r
            busy = f", GPU busy {100 * r['gpu_busy']:.0f}%" if r.get("gpu_busy") is not None else ""
            print(f"{name} {kind} {layout_name(*lay)} (run {rep + 1}): {r['steps']} steps in {r['wall']:.2f} s -> "
                  f"{rates[lay][-1]:.1f} steps/s{busy}", flush=True)
    out = {}
    base = min(k for k, _, _ in todo)  # today's layout at the smallest K: the "today's K = 2" when K = 2 is the smallest
    print(f"\n{name} {kind}: steps/s min/median/max over {args.repeat} run(s), median ratio to K:1:1 at the same K "
          f"and to today's K={base}")
    for lay in todo:
        med = statistics.median(rates[lay])
        today = statistics.median(rates[(lay[0], 1, 1)])
        lat = last[lay].get("latency") or {}
        smallest = statistics.median(rates[(base, 1, 1)])
        print(f"  {layout_name(*lay):>16}: {min(rates[lay]):8.1f} / {med:8.1f} / {max(rates[lay]):8.1f} steps/s  "
              f"{med / today:5.2f}x same K, {med / smallest:5.2f}x K={base}  per tick {lat.get('ms_per_tick')}")
        out[layout_name(*lay)] = {"steps": last[lay]["steps"], "steps_per_s": [round(x, 2) for x in rates[lay]],
                                  "median_ratio_to_today": round(med / today, 3),
                                  f"median_ratio_to_today_K{base}": round(med / smallest, 3), "latency": lat or None,
                                  "gpu_busy": last[lay].get("gpu_busy")}
    print()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/synthetic_tiny")
    ap.add_argument("--models", default="map_cma,cma")
    ap.add_argument("--envs", default="1,2,4,8")
    ap.add_argument("--baseline", default="1,2", help="process counts of the one-env-per-process baseline")
    ap.add_argument("--size", type=int, default=256, help="depth/semantic size (RGB at most 224)")
    ap.add_argument("--small", action="store_true", help="small depth CNN and ResNet-18 RGB trunk (CPU-friendly)")
    ap.add_argument("--agent-steps", type=int, default=40, help="policy steps per episode (env.max_agent_steps)")
    ap.add_argument("--tours", default="", help="tour ids to run (default: all of val_unseen)")
    ap.add_argument("--layouts", default="", help="engine layouts K:M:G (environments, per process, groups), each against K:1:1")
    ap.add_argument("--collect", default="", help="collection layouts K:M:G, each against K:1:1 (one teacher-forcing round)")
    ap.add_argument("--collect-tours", type=int, default=6, help="tours collected per collection measurement")
    ap.add_argument("--repeat", type=int, default=1, help="measure every layout this many times, alternating (min/median/max)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    data = Path(args.data)
    build_synthetic("tiny", data, progress=False)
    envs = [int(k) for k in args.envs.split(",") if k]
    procs = [int(k) for k in args.baseline.split(",") if k]
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}; "
          f"device {args.device}" + (f" ({torch.cuda.get_device_name(0)})" if args.device.startswith("cuda") else ""))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in args.models.split(","):
            base = [f"data.root={data}", "data.split=val_unseen", "eval.agent=policy", "policy.checkpoint=random", f"env.max_agent_steps={args.agent_steps}",
                    *model_overrides(name, args.size, args.small)]
            if args.tours:
                base.append(f"eval.tours=[{args.tours}]")
            from ivln_ce.evaluation.evaluator import load_split

            cfg = load_config(None, base)
            split = load_split(cfg)
            ckpt = make_checkpoint(cfg, tmp / f"{name}.pth", split.vocab_size)
            base.append(f"policy.checkpoint={ckpt}")
            tours = list(range(len(split.items)))
            rows = {}
            for k in envs:
                r = run_engine(base, k, tmp / f"{name}_k{k}", args.device)
                rows[f"engine K={k}"] = r
                busy = f", GPU busy {100 * r['gpu_busy']:.0f}% of the time" if r.get("gpu_busy") is not None else ""
                print(f"{name} engine K={k}: {r['steps']} steps in {r['wall']:.1f} s (whole evaluation {r['total']:.1f} s) -> "
                      f"{r['steps'] / r['wall']:.1f} steps/s{busy}", flush=True)
            for p in procs:
                r = run_baseline(base, p, tours, args.device)
                rows[f"baseline P={p}"] = r
                print(f"{name} baseline P={p}: {r['steps']} steps in {r['wall']:.1f} s (with start-up {r['total']:.1f} s) -> "
                      f"{r['steps'] / r['wall']:.1f} steps/s", flush=True)
            if envs:
                summarise(name, envs, procs, rows)
            results[name] = {k: {"steps": v["steps"], "wall_s": round(v["wall"], 2), "latency": v.get("latency"),
                                 "gpu_busy": v.get("gpu_busy")} for k, v in rows.items()}
            for kind, spec in (("engine", args.layouts), ("collection", args.collect)):
                layouts = parse_layouts(spec)
                if layouts:
                    results[name][kind + " layouts"] = compare_layouts(kind, name, base, layouts, tmp, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def summarise(name: str, envs: list[int], procs: list[int], rows: dict) -> None:
    """Steps/s of the engine at each K and of the baseline, speed-up and efficiency."""
    one = rows[f"engine K={envs[0]}"]
    rate1 = one["steps"] / one["wall"]
    print(f"\n{name}: steps/s, speed-up over engine K={envs[0]}, scaling efficiency")
    for key, r in rows.items():
        rate = r["steps"] / r["wall"]
        k = int(key.split("=")[1])
        print(f"  {key:>14}: {rate:8.1f} steps/s  {rate / rate1:5.2f}x  efficiency {100 * rate / rate1 / k:5.1f}%")
    for p in procs:
        if f"engine K={p}" in rows:
            e, b = rows[f"engine K={p}"], rows[f"baseline P={p}"]
            print(f"  engine vs baseline at {p} process(es): {(e['steps'] / e['wall']) / (b['steps'] / b['wall']):.2f}x")
    lat = rows[f"engine K={envs[-1]}"]["latency"]
    print(f"  latency at K={envs[-1]}: per step {lat['ms_per_step']}, per tick {lat.get('ms_per_tick')}\n")


if __name__ == "__main__":
    sys.exit(main())
