"""Deferred encoding in teacher-forcing collection (``train.deferred_encoding``): the frozen
encoders see each episode's frames in chunks instead of a few per tick. The per-tick path is
the oracle: the same episodes, actions, labels, progress and maps exactly, the features within
rounding; and a deferred store does not depend on how many environments collected it."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.models.factory import build_policy  # noqa: E402
from ivln_ce.training import collect  # noqa: E402
from ivln_ce.training.collect import collect_round, plan_round  # noqa: E402
from ivln_ce.training.store import TrajectoryStore, TrajectoryWriter  # noqa: E402
from ivln_ce.training.trainer import _pipeline, canonical_order, load_training_data  # noqa: E402

from .test_trainer import SMALL  # noqa: E402

MODELS = {
    "cma": ["policy.name=cma", "simulator.sensors=[rgb,depth]"],
    "map_cma": ["policy.name=map_cma", "simulator.sensors=[depth,semantic]", "mapping.mode=iterative",
                "mapping.semantics=gt", "env.oracle_phases=true", "train.use_tours=true"],
}


def _collect(data_root, out, model, *extra, beta=1.0):
    """One collection round of every train item into ``out``; returns the row count of every
    frozen-encoder call."""
    cfg = load_config(None, [f"data.root={data_root}", f"results_dir={out}", *MODELS[model], *SMALL,
                             "env.max_agent_steps=80", *extra])
    data = load_training_data(cfg)
    policy, _ = build_policy(cfg.policy, data.vocab_size, cfg.train, "cpu", seed=0)
    pipeline = _pipeline(cfg, policy, "cpu")
    calls = []
    encode = pipeline.encode

    def counting(depth, rgb):
        calls.append(int(depth.shape[0]))
        return encode(depth, rgb)

    pipeline.encode = counting
    plan = plan_round(data.items, 0, int(cfg.seed), 0)
    with TrajectoryWriter(out, "rank0", fp16=False) as w:
        collect_round(cfg, data.items, plan, data.references, data.scenes_dir, policy, pipeline, w, beta, 0)
    store = TrajectoryStore(out)
    return [store[i] for i in canonical_order(store)], calls


def _compare(a_eps, b_eps, exact_features: bool):
    assert [e.meta for e in a_eps] == [e.meta for e in b_eps] and len(a_eps) > 0
    worst = 0.0
    for a, b in zip(a_eps, b_eps):
        assert np.array_equal(a.constants["instruction"], b.constants["instruction"])
        assert list(a.steps) == list(b.steps)  # the same fields, in the same order
        for k in a.steps:
            x, y = np.asarray(a.steps[k]), np.asarray(b.steps[k])
            assert x.dtype == y.dtype and x.shape == y.shape, k
            if k.endswith("_features") and not exact_features:
                scale = np.abs(y).max()
                worst = max(worst, float(np.abs(x.astype(np.float64) - y).max() / scale))
            else:
                assert np.array_equal(x, y), (a.meta["episode_id"], k)
    return worst


@pytest.mark.parametrize("model", sorted(MODELS))
def test_deferred_collection_stores_what_the_per_tick_path_stores(tiny_benchmark, tmp_path, monkeypatch, model):
    """Several chunks per episode (chunk 16) and a remainder: every field equal, features
    within rounding (a misplaced frame moves them by their whole scale); the deferred calls are
    chunks, the per-tick calls ticks. The per-tick path itself moves the RGB trunk's features by
    9.7e-6 of their scale between one and two environments (this VM); deferred against per tick:
    9.7e-6 (CMA), 1.0e-6 (MAP-CMA's depth CNN)."""
    monkeypatch.setattr(collect, "ENCODE_CHUNK", 16)
    slow, slow_calls = _collect(tiny_benchmark, tmp_path / "tick", model, "train.num_envs=2", "train.deferred_encoding=false")
    fast, fast_calls = _collect(tiny_benchmark, tmp_path / "deferred", model, "train.num_envs=2")
    lengths = [e.length for e in fast]
    assert max(lengths) > 2 * 16 and any(n % 16 for n in lengths)  # several chunks and a remainder
    worst = _compare(fast, slow, exact_features=False)
    assert worst < 1e-4
    assert max(slow_calls) <= 2  # per tick: at most one frame per environment
    # deferred: each episode in chunks of 16 and one remainder, nothing encoded twice
    assert sorted(fast_calls) == sorted(c for n in lengths for c in [16] * (n // 16) + ([n % 16] if n % 16 else []))
    assert sum(fast_calls) == sum(slow_calls) == sum(lengths)


def test_a_deferred_store_does_not_depend_on_the_number_of_environments(tiny_benchmark, tmp_path):
    """Per tick, a frame's features depend on which streams shared its batch; deferred, only on
    its episode: one and three environments store the same bytes."""
    one, _ = _collect(tiny_benchmark, tmp_path / "one", "cma", "train.num_envs=1")
    three, _ = _collect(tiny_benchmark, tmp_path / "three", "cma", "train.num_envs=3")
    _compare(one, three, exact_features=True)


def test_rounds_in_which_the_policy_acts_encode_per_tick(tiny_benchmark, tmp_path):
    """With beta < 1 the policy needs its features at every tick: nothing is deferred."""
    eps, calls = _collect(tiny_benchmark, tmp_path / "dagger", "cma", "train.num_envs=2", beta=0.5)
    assert max(calls) <= 2 and sum(calls) == sum(e.length for e in eps)
