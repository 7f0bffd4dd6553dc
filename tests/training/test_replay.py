"""Actions-only stores (``train.store_observations=false``): the replay re-renders exactly what a
full collection stores, training on it gives the same weights, and a replay that diverges
from the store fails with the episode named."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from ivln_ce.config import ConfigError, load_config  # noqa: E402
from ivln_ce.training.collect import ACTION_FIELDS, ReplayError, plan_round, replay_round  # noqa: E402
from ivln_ce.training.store import Episode, TrajectoryStore, TrajectoryWriter  # noqa: E402
from ivln_ce.training.trainer import _pipeline, canonical_order, check_train_config, load_training_data, train  # noqa: E402

from .test_trainer import SMALL, _final_weights, latent  # noqa: E402


def episodes(folder):
    store = TrajectoryStore(folder)
    return [store[i] for i in canonical_order(store)]


def assert_same_episodes(full, replayed):
    assert [e.meta for e in full] == [e.meta for e in replayed]  # ids, tours, rounds, order keys, lengths
    for a, b in zip(full, replayed):
        assert np.array_equal(a.constants["instruction"], b.constants["instruction"])
        assert a.steps.keys() == b.steps.keys()
        for k in a.steps:
            x, y = np.asarray(a.steps[k]), np.asarray(b.steps[k])
            assert x.dtype == y.dtype and x.shape == y.shape, k
            if k.endswith("_features"):  # the same frames through the same frozen encoders
                assert np.allclose(x.astype(np.float32), y.astype(np.float32), rtol=2e-3, atol=2e-3), k
            else:  # actions, labels, progress, maps: exactly
                assert np.array_equal(x, y), (a.meta["episode_id"], k)


DAGGER = ["train.p=0.0", "train.iterations=2", "train.update_size=3", "env.max_agent_steps=40"]  # the policy rarely stops


@pytest.fixture(scope="module")
def dagger_runs(tiny_benchmark, tmp_path_factory):
    """Round 0 teacher forcing, round 1 the policy acting (beta = 0); once with a full store,
    once with an actions-only store and its replay."""
    tmp = tmp_path_factory.mktemp("replay")
    full = train(load_config(None, latent(tiny_benchmark, tmp / "full", *DAGGER)), show_progress=False)
    small = train(load_config(None, latent(tiny_benchmark, tmp / "small", *DAGGER, "train.store_observations=false")),
                  show_progress=False)
    return tmp, full, small


@pytest.mark.slow
def test_a_replayed_dagger_run_stores_and_trains_like_a_full_store(dagger_runs):
    """The replay must follow the executed actions, not the expert, and rebuild every observation."""
    tmp, full, small = dagger_runs
    assert full["optimizer_steps"] == small["optimizer_steps"] > 0
    actions_only = episodes(tmp / "small" / "store")
    assert all(set(e.steps) == set(ACTION_FIELDS) for e in actions_only)
    reference = episodes(tmp / "full" / "store")
    assert any(np.any(e.steps["executed_actions"] != e.steps["oracle_actions"]) for e in reference)  # the policy acted
    assert len(reference) == len(actions_only) >= 6
    for a, b in zip(reference, actions_only):
        for k in ACTION_FIELDS:
            assert np.array_equal(a.steps[k], b.steps[k].astype(np.int64)), (a.meta["episode_id"], k)
    assert_same_episodes(reference, episodes(tmp / "small" / "replay"))
    assert small["store_bytes"] * 20 < full["store_bytes"]  # what is kept is a small fraction
    a, names_a = _final_weights(tmp / "full")
    b, names_b = _final_weights(tmp / "small")
    assert names_a == names_b == ["ckpt.0.pth", "ckpt.1.pth"]
    for k in a:
        if a[k].is_floating_point():
            assert torch.allclose(a[k].float(), b[k].float(), atol=1e-5), k


@pytest.mark.slow
def test_a_replayed_tour_rebuilds_iterative_maps_across_oracle_walks(tiny_benchmark, tmp_path):
    """A tour through the iterative runner, round 1 driven by the policy: the oracle walks start
    where the policy stopped, and the maps carry over episodes; the replay must rebuild both."""
    args = [f"data.root={tiny_benchmark}", "policy.name=map_cma", "simulator.sensors=[depth,semantic]", *SMALL,
            "mapping.mode=iterative", "mapping.semantics=gt", "env.oracle_phases=true", "train.use_tours=true",
            "train.tours=[0]", "train.batch_size=4", "train.epochs=1", "train.progress_weight=1.0", "train.p=0.0",
            "train.iterations=2", "env.max_agent_steps=15"]
    train(load_config(None, args + [f"results_dir={tmp_path / 'full'}"]), show_progress=False)
    train(load_config(None, args + [f"results_dir={tmp_path / 'small'}", "train.store_observations=false"]), show_progress=False)
    reference = episodes(tmp_path / "full" / "store")
    assert [(e.meta["round"], e.meta["position"]) for e in reference] == [(r, p) for r in (0, 1) for p in range(4)]
    assert any(np.any(e.steps["executed_actions"] != e.steps["oracle_actions"]) for e in reference[4:])  # the policy acted
    assert_same_episodes(reference, episodes(tmp_path / "small" / "replay"))
    # the later episodes start from maps of the earlier ones: their first maps are not empty
    assert reference[-1].steps["occupancy_map"][0].any()


@pytest.mark.slow
def test_a_diverging_replay_names_the_episode_and_step(tiny_benchmark, dagger_runs):
    from ivln_ce.models.factory import build_policy

    tmp = dagger_runs[0]
    cfg = load_config(None, latent(tiny_benchmark, tmp / "small", *DAGGER, "train.store_observations=false"))
    stored = [e for e in episodes(tmp / "small" / "store") if e.meta["round"] == 0]
    # a copy of round 0 in which one executed action of the first episode is changed
    bad, t = stored[0], 2
    steps = {k: np.array(v) for k, v in bad.steps.items()}
    steps["executed_actions"][t] = 3 if steps["executed_actions"][t] != 3 else 2
    with TrajectoryWriter(tmp / "tampered", "rank0", codec="zlib") as w:
        w.append(Episode(dict(bad.meta), dict(bad.constants), steps))
        for e in stored[1:]:
            w.append(e)
    data = load_training_data(cfg)
    plan = plan_round(data.items, 3, int(cfg.seed), 0)
    policy, _ = build_policy(cfg.policy, data.vocab_size, cfg.train, "cpu", seed=0)

    def replay(store, out):
        with TrajectoryWriter(out, "rank0") as w:
            replay_round(cfg, data.items, plan, data.references, data.scenes_dir, policy, _pipeline(cfg, policy, "cpu"),
                         TrajectoryStore(store), w, 0, 1.0)

    with pytest.raises(ReplayError, match=f"diverged: episode {bad.meta['episode_id']} of tour"):
        replay(tmp / "tampered", tmp / "out")  # after the changed action the expert says otherwise
    replay(tmp / "small" / "store", tmp / "out2")  # the untouched store replays
    assert [e.meta for e in episodes(tmp / "out2")] == [e.meta for e in stored]


def test_actions_only_stores_refuse_batch_statistics_during_collection(tiny_benchmark, tmp_path):
    cfg = load_config(None, latent(tiny_benchmark, tmp_path / "x", "train.store_observations=false", "train.bn_train_mode=true"))
    with pytest.raises(ConfigError, match="bn_train_mode"):
        check_train_config(cfg)


def test_a_lost_or_damaged_replay_cache_is_noticed(tmp_path):
    """A resume rebuilds the replay cache if it no longer holds what its cursor records, or
    holds it damaged (a checksum fails);
    truncating a store to a shard that is gone is an error, not an empty shard."""
    from ivln_ce.training.store import StoreError
    from ivln_ce.training.trainer import _store_intact as _replay_cache_intact

    ep = Episode({"episode_id": "1", "tour_id": "0", "steps": 2, "round": 0, "order": [0, 0, 0], "position": 0},
                 {}, {"executed_actions": np.zeros(2, np.int8)})
    for shard in ("rank0", "rank1"):
        with TrajectoryWriter(tmp_path / "replay", shard) as w:
            w.append(ep)
            w.append(ep)
    assert _replay_cache_intact(tmp_path / "replay", {"rank0": 2, "rank1": 1})
    assert _replay_cache_intact(tmp_path / "nothing", {})
    assert not _replay_cache_intact(tmp_path / "replay", {"rank0": 3})
    assert not _replay_cache_intact(tmp_path / "nothing", {"rank0": 1})
    data = tmp_path / "replay" / "rank0.data"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0x01  # one flipped bit in rank0's second episode
    data.write_bytes(bytes(raw))
    assert not _replay_cache_intact(tmp_path / "replay", {"rank0": 2, "rank1": 1})
    assert _replay_cache_intact(tmp_path / "replay", {"rank0": 1, "rank1": 1})  # the damage lies past the cursor
    for f in (tmp_path / "replay").glob("rank1.*"):
        f.unlink()
    assert not _replay_cache_intact(tmp_path / "replay", {"rank0": 2, "rank1": 1})
    with pytest.raises(StoreError, match="rank1"):
        TrajectoryStore(tmp_path / "replay").truncate({"rank0": 1, "rank1": 1})
    TrajectoryStore(tmp_path / "replay").truncate({"rank0": 1})
    assert len(TrajectoryStore(tmp_path / "replay")) == 1
