"""train.store_cache: a teacher-forcing store is collected once and reused by runs of the same
inputs (other seeds), proven equal to what those runs would collect themselves; a store of
other inputs has another fingerprint, and a damaged entry is never used."""

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.training import store_cache  # noqa: E402
from ivln_ce.training.store import TrajectoryStore  # noqa: E402
from ivln_ce.training.trainer import FROM_CACHE, train  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def run(data: Path, out: Path, *extra: str) -> dict:
    cfg = load_config([str(REPO / "configs/embedded/cma.yaml")],
                      [f"data.root={data}", f"train.out_dir={out}", "train.epochs=1", "train.batch_size=2", "train.official_batching=true", "train.tours=[0,3]", "train.num_envs=1",
                       "policy.frozen_encoder_seed=0", *extra])
    return train(cfg, show_progress=False)


def episodes(folder: Path) -> dict:
    store = TrajectoryStore(folder / "store")
    return {store.meta(i)["episode_id"]: store[i] for i in range(len(store))}


def assert_same_store(a: Path, b: Path) -> None:
    """The same episodes with the same arrays (stores of other runs may hold them in another order)."""
    ea, eb = episodes(a), episodes(b)
    assert ea.keys() == eb.keys() and len(ea) >= 2
    for eid, x in ea.items():
        y = eb[eid]
        assert x.steps.keys() == y.steps.keys() and x.constants.keys() == y.constants.keys()
        for k in x.steps:
            assert np.array_equal(np.asarray(x.steps[k]), np.asarray(y.steps[k])), (eid, k)
        for k in x.constants:
            assert np.array_equal(np.asarray(x.constants[k]), np.asarray(y.constants[k])), (eid, k)


def weights(folder: Path) -> dict:
    return torch.load(folder / "ckpt.0.pth", weights_only=False)["state_dict"]


def test_a_store_is_collected_once_and_is_what_another_seed_collects(tiny_benchmark, tmp_path, capsys):
    cache = tmp_path / "cache"
    run(tiny_benchmark, tmp_path / "seed1", "seed=1", f"train.store_cache={cache}")
    entries = [p for p in cache.iterdir()]
    assert len(entries) == 1 and (entries[0] / "manifest.json").is_file()
    assert not (tmp_path / "seed1" / FROM_CACHE).exists()  # collected, then published
    capsys.readouterr()
    run(tiny_benchmark, tmp_path / "seed2", "seed=2", f"train.store_cache={cache}")
    assert "of the same inputs reused" in capsys.readouterr().err
    assert json.loads((tmp_path / "seed2" / FROM_CACHE).read_text())["entry"] == str(entries[0])
    # proof by identity: seed 2 collecting on its own stores exactly the cached episodes, and
    # training on the reused store gives bit for bit the weights of training on its own
    run(tiny_benchmark, tmp_path / "seed2_own", "seed=2")
    assert_same_store(tmp_path / "seed2_own", tmp_path / "seed1")
    assert_same_store(tmp_path / "seed2", tmp_path / "seed1")
    own, reused, other = weights(tmp_path / "seed2_own"), weights(tmp_path / "seed2"), weights(tmp_path / "seed1")
    assert own.keys() == reused.keys() and all(torch.equal(own[k], reused[k]) for k in own)
    assert not torch.equal(own["net.state_encoder.rnn.weight_hh_l0"], other["net.state_encoder.rnn.weight_hh_l0"])


@pytest.mark.slow
def test_other_inputs_and_damaged_entries_are_not_reused(tiny_benchmark, tmp_path, capsys, caplog):
    cache = tmp_path / "cache"
    run(tiny_benchmark, tmp_path / "a", "seed=1", f"train.store_cache={cache}")
    (entry,) = list(cache.iterdir())
    # other frozen encoders store other features: another fingerprint, collected anew
    run(tiny_benchmark, tmp_path / "b", "seed=1", "policy.frozen_encoder_seed=5", f"train.store_cache={cache}")
    assert not (tmp_path / "b" / FROM_CACHE).exists() and len(list(cache.iterdir())) == 2
    # a flipped byte in a cached shard: the entry fails its checksum, the round is collected and the entry replaced
    shard = next(p for p in (entry / "store").iterdir() if p.suffix == ".data")
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    run(tiny_benchmark, tmp_path / "c", "seed=3", f"train.store_cache={cache}")
    assert not (tmp_path / "c" / FROM_CACHE).exists()
    assert "does not match its checksum" in caplog.text
    assert store_cache._entry_problem(entry, entry.name) is None  # replaced by the fresh, equal store
    assert_same_store(tmp_path / "c", tmp_path / "a")


def _fake_store(folder: Path) -> None:
    from ivln_ce.training.store import Episode, TrajectoryWriter

    with TrajectoryWriter(folder, "rank0") as w:
        for k in range(3):
            w.append(Episode({"episode_id": str(k), "steps": 2}, {"instruction": np.arange(4)},
                             {"depth_features": np.full((2, 4), k, np.float32), "oracle_actions": np.array([1, 0])}))


def test_an_entry_is_used_only_under_its_own_fingerprint_and_intact(tmp_path):
    _fake_store(tmp_path / "run" / "store")
    fp, other = "a" * 64, "b" * 64
    entry = store_cache.publish(tmp_path / "cache", fp, tmp_path / "run" / "store")
    assert store_cache.fetch(tmp_path / "cache", other, tmp_path / "x" / "store") is None  # no entry of those inputs
    # renamed to another fingerprint: its manifest still names its own inputs, so it is refused
    (tmp_path / "cache" / fp).rename(tmp_path / "cache" / other)
    (tmp_path / "x").mkdir()
    assert store_cache.fetch(tmp_path / "cache", other, tmp_path / "x" / "store") is None and not (tmp_path / "x" / "store").exists()
    (tmp_path / "cache" / other).rename(entry)
    manifest = store_cache.fetch(tmp_path / "cache", fp, tmp_path / "x" / "store")
    assert manifest["episodes"] == 3 and len(TrajectoryStore(tmp_path / "x" / "store")) == 3
    # an extra file, a link in place of a file: refused
    (entry / "store" / "extra.data").write_bytes(b"x")
    assert "differ from the manifest" in store_cache._entry_problem(entry, fp)
    (entry / "store" / "extra.data").unlink()
    index = next(p for p in (entry / "store").iterdir() if p.suffix == ".index")
    target = tmp_path / "elsewhere.index"
    target.write_bytes(index.read_bytes())
    index.unlink()
    index.symlink_to(target)
    assert "not a plain file" in store_cache._entry_problem(entry, fp)
    # the cache folder itself may not be a link
    (tmp_path / "link").symlink_to(tmp_path / "cache")
    with pytest.raises(store_cache.StoreCacheError, match="symbolic link"):
        store_cache.fetch(tmp_path / "link", fp, tmp_path / "y" / "store")


def test_a_folder_the_cache_did_not_write_is_never_replaced(tmp_path):
    _fake_store(tmp_path / "run" / "store")
    fp = "c" * 64
    foreign = tmp_path / "cache" / fp
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(store_cache.StoreCacheError, match="not an entry this cache wrote"):
        store_cache.publish(tmp_path / "cache", fp, tmp_path / "run" / "store")
    assert (foreign / "notes.txt").read_text() == "mine" and not any(p.name.startswith(".") for p in (tmp_path / "cache").iterdir())


def test_the_fingerprint_follows_the_inputs_and_ignores_the_seed():
    from ivln_ce.config import PolicyConfig, TrainConfig
    from ivln_ce.models.factory import build_policy

    base = ["policy.name=cma", "policy.depth_backbone=small", "policy.rgb_depth=18", "policy.frozen_encoder_seed=0"]

    def fp(*over, seed=1, update_size=0):
        cfg = load_config(None, [*base, f"seed={seed}", f"train.update_size={update_size}", *over])
        pc = dict(name="cma", depth_backbone="small", rgb_depth=18, frozen_encoder_seed=int(cfg.policy.frozen_encoder_seed))
        policy, _ = build_policy(PolicyConfig(**pc), 30, TrainConfig(), seed=seed)
        return store_cache.collection_fingerprint(cfg, {}, {}, policy, seed if update_size else None)

    same = fp()
    assert fp(seed=2) == same and fp("train.lr=0.5", "train.batch_size=64", "train.epochs=3") == same
    assert fp("simulator.depth.width=32") != same and fp("mapping.mode=episodic") != same
    assert fp("policy.frozen_encoder_seed=3") != same
    assert fp(update_size=4) != fp(update_size=4, seed=2)  # a subset plan depends on the seed
