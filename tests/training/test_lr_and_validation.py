"""The batch-size learning-rate rule with its warm-up, and teacher-forced validation
(``train.val_split``): hand-computed rates, the rates the optimizer used, validation scores
recomputed independently of batching, and validation leaving the trained weights unchanged."""

import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

torch = pytest.importorskip("torch", reason="training needs torch")

from ivln_ce.config import ConfigError, load_config  # noqa: E402
from ivln_ce.models.official_weights import read_checkpoint  # noqa: E402
from ivln_ce.training import lr_rule  # noqa: E402
from ivln_ce.training.store import TrajectoryStore  # noqa: E402
from ivln_ce.training.trainer import check_train_config, train  # noqa: E402
from ivln_ce.training.validation import score_store, validation_batches  # noqa: E402

from tests.training.test_trainer import latent, train_until_first_epoch  # noqa: E402


def test_peak_rates_by_hand():
    assert lr_rule.peak_lr(1e-3, 64, 8, "fixed") == 1e-3
    assert lr_rule.peak_lr(1e-3, 64, 8, "sqrt") == pytest.approx(1e-3 * 2 * math.sqrt(2), rel=1e-12)
    assert lr_rule.peak_lr(1e-3, 64, 8, "linear") == pytest.approx(8e-3, rel=1e-12)
    assert lr_rule.peak_lr(2.5e-4, 5, 5, "sqrt") == 2.5e-4
    assert lr_rule.peak_lr(1e-3, 2, 8, "linear") == pytest.approx(2.5e-4, rel=1e-12)  # smaller batches scale down
    with pytest.raises(ConfigError, match="lr_reference_batch"):
        lr_rule.peak_lr(1e-3, 64, 0, "sqrt")


def test_warm_up_rises_linearly_to_the_peak_then_stays():
    assert [lr_rule.lr_at(s, 0.4, 4) for s in range(1, 7)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4, 0.4])
    assert [lr_rule.lr_at(s, 0.4, 0) for s in (1, 2, 100)] == [0.4, 0.4, 0.4]
    assert lr_rule.lr_at(1, 0.4, 1) == 0.4


def _cfg(*extra):
    return load_config(None, ["policy.name=cma", "simulator.sensors=[rgb,depth]", "train.out_dir=x", *extra])


def test_refusals_name_the_setting():
    with pytest.raises(ConfigError, match="peak learning rate of 4"):
        check_train_config(_cfg("train.lr=0.5", "train.batch_size=64", "train.lr_rule=linear", "train.lr_reference_batch=8"))
    with pytest.raises(ConfigError, match="lr_reference_batch"):
        check_train_config(_cfg("train.batch_size=64", "train.lr_rule=sqrt"))
    with pytest.raises(ConfigError, match="train.val_split"):
        check_train_config(load_config(None, ["policy.name=tour_cma", "simulator.sensors=[rgb,depth]", "train.out_dir=x",
                                              "train.trainer=tour_sequential", "train.use_tours=true", "train.val_split=val_seen"]))
    check_train_config(_cfg("train.batch_size=64", "train.lr_rule=sqrt", "train.lr_reference_batch=8", "train.val_split=val_seen"))


CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RECIPES = sorted(p.name for p in (CONFIGS / "embedded").glob("*.yaml") if not p.name.startswith("_") and "_rl_" not in p.name)


def test_every_embedded_teacher_forcing_recipe_is_covered():
    assert len(RECIPES) == 10 and "cma.yaml" in RECIPES and "map_cma_iterative_gt.yaml" in RECIPES


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_large_batch_overlay_keeps_each_recipe_and_scales_its_rate(recipe):
    base = load_config(CONFIGS / "embedded" / recipe, [])
    both = load_config([CONFIGS / "embedded" / recipe, CONFIGS / "profiles" / "large_batch.yaml"], [])
    assert int(base.train.batch_size) == 8  # the overlay's reference batch is the recipes' batch
    assert (int(both.train.batch_size), both.train.lr_rule.value, int(both.train.lr_reference_batch)) == (64, "sqrt", 8)
    assert lr_rule.peak_of(both.train) == pytest.approx(float(base.train.lr) * math.sqrt(8), rel=1e-12)
    for key in ("train.epochs", "train.lr", "train.iterations", "train.p", "policy.name", "mapping.mode", "data.root"):
        assert OmegaConf.select(both, key) == OmegaConf.select(base, key), key


def test_instruction_ablations_of_a_batch_by_hand():
    from ivln_ce.data.language_ablation import InstructionAblation
    from ivln_ce.training.validation import ablate_batch_instructions

    tokens = torch.tensor([[[5, 6, 7, 0, 0], [1, 2, 0, 0, 0], [9, 8, 7, 6, 5]]])
    assert ablate_batch_instructions(tokens, InstructionAblation.parse("last:2")).tolist() == \
        [[[6, 7, 0, 0, 0], [1, 2, 0, 0, 0], [6, 5, 0, 0, 0]]]
    assert ablate_batch_instructions(tokens, InstructionAblation.parse("none")).tolist() == [[[0] * 5] * 3]
    assert ablate_batch_instructions(tokens, InstructionAblation.parse("full")) is tokens


def test_validation_batches_cover_every_episode_once_longest_first():
    lengths = [3, 9, 1, 9, 4, 7, 2]
    batches = validation_batches(lengths, 3)
    assert sorted(i for b in batches for i in b) == list(range(7))
    assert batches == [[1, 3, 5], [4, 0, 6], [2]]


def _scalars(folder, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = EventAccumulator(str(folder / "tb"), size_guidance={"scalars": 0})
    tb.Reload()
    return [(e.step, e.value) for e in tb.Scalars(tag)]


def test_rates_used_and_validation_scores_recomputed(tiny_benchmark, tmp_path):
    """A run with the linear rule (base 1e-3 at batch 1, batch 2: peak 2e-3) and a 3-step warm-up
    logs the rate of every step, and validates on val_seen after each epoch with scores equal
    to a recomputation from the epoch's checkpoint, batch by batch of one episode; the same run
    without validation ends with bit-equal weights (validation only observes)."""
    from ivln_ce.models.factory import build_policy

    torch.set_num_threads(1)
    common = ["train.update_size=4", "train.epochs=2", "train.num_envs=1", "train.lr=1e-3", "train.lr_rule=linear",
              "train.lr_reference_batch=1", "train.lr_warmup_steps=3"]
    out = tmp_path / "val"
    cfg = load_config(None, latent(tiny_benchmark, out, *common, "train.val_split=val_seen", "train.val_ablations=[none,last:2]",
                                   f"train.out_dir={out}"))
    summary = train(cfg, show_progress=False)
    assert summary["optimizer_steps"] == 4
    assert summary["learning_rate"] == {"rule": "linear", "base": 1e-3, "reference_batch": 1, "batch_size": 2, "peak": 2e-3,
                                        "warmup_steps": 3}
    rates = _scalars(out, "train/learning_rate")
    assert [s for s, _ in rates] == [1, 2, 3, 4]
    assert [v for _, v in rates] == pytest.approx([2e-3 / 3, 4e-3 / 3, 2e-3, 2e-3], rel=1e-6)
    groups = read_checkpoint(out / "ckpt.1.pth")["optim_state"]["param_groups"]
    assert [g["lr"] for g in groups] == pytest.approx([2e-3] * len(groups))

    records = summary["validation"]
    assert [(r["round"], r["epoch"], r["step"]) for r in records] == [(0, 0, 2), (0, 1, 4)]
    from ivln_ce.data.episodes import load_episodes

    episodes = list(load_episodes(cfg.data.episodes.replace("{split}", "val_seen")))
    store = TrajectoryStore(out / "val_store")
    try:
        assert len(store) == records[0]["episodes"] == 12
        ids = sorted(str(store.meta(i)["episode_id"]) for i in range(len(store)))
        assert len(set(ids)) == 12
        assert ids == sorted(str(e.episode_id) for e in episodes)
        assert records[0]["steps"] == sum(store.steps(i) for i in range(len(store)))
        for r, ckpt in zip(records, ("ckpt.0.pth", "ckpt.1.pth")):
            pcfg = load_config(None, latent(tiny_benchmark, out, *common, f"policy.checkpoint={out / ckpt}"))
            policy, _ = build_policy(pcfg.policy, summary_vocab(out), pcfg.train, "cpu")
            one = score_store(policy, store, 1, float(pcfg.train.inflection_weight), pcfg.train.precision)
            assert one["action_accuracy"] == pytest.approx(r["action_accuracy"], abs=1e-12)
            assert one["action_loss"] == pytest.approx(r["action_loss"], rel=1e-5)
            # by hand from the per-episode forwards: accuracy over every valid step, with each
            # episode's instruction as stored, emptied, or cut to its last 2 tokens
            from ivln_ce.data.language_ablation import last_tokens
            from ivln_ce.training.batching import collate

            assert set(r["ablations"]) == {"none", "last:2"}
            losses = {r["action_loss"], r["ablations"]["none"]["action_loss"], r["ablations"]["last:2"]["action_loss"]}
            assert len(losses) == 3  # the ablations reached the model
            for name, cut in (("full", lambda t: t), ("none", lambda t: [0] * len(t)), ("last:2", lambda t: last_tokens(t, 2))):
                correct = valid = 0
                for i in range(len(store)):
                    b = collate([store[i]], float(pcfg.train.inflection_weight))
                    obs = dict(b.observations)
                    obs["instruction"] = torch.tensor([cut(obs["instruction"][0, 0].tolist())])[None]
                    policy.eval()
                    with torch.no_grad():
                        logits, _, _ = policy.forward_sequence(obs, b.prev_actions, b.masks, b.masks)
                    correct += int((logits.argmax(-1) == b.expert)[b.valid].sum())
                    valid += int(b.valid.sum())
                got = r if name == "full" else r["ablations"][name]
                assert got["action_accuracy"] == correct / valid, name
        assert records[0]["action_loss"] != records[1]["action_loss"]  # the second epoch changed the model it scored
    finally:
        store.close()

    plain = tmp_path / "plain"
    train(load_config(None, latent(tiny_benchmark, plain, *common, f"train.out_dir={plain}")), show_progress=False)
    a = read_checkpoint(out / "ckpt.1.pth")["state_dict"]
    b = read_checkpoint(plain / "ckpt.1.pth")["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def summary_vocab(out):
    cfg = json.loads((out / "config.json").read_text())
    from ivln_ce.data.episodes import load_episodes

    ds = load_episodes(cfg["data"]["episodes"].replace("{split}", cfg["train"]["split"]))
    return len(ds.vocab) if ds.vocab is not None else 1 + max(t for e in ds for t in e.instruction_tokens)


@pytest.mark.parametrize("store", ["intact", "deleted", "damaged"])
def test_a_validated_run_stopped_after_an_epoch_resumes_to_the_same_records(tiny_benchmark, tmp_path, monkeypatch, store):
    """Stopped right after its first epoch's resume point, a run with validation resumes without
    collecting the validation split again (or, when its store was deleted or damaged meanwhile,
    collects it again) and ends with the uninterrupted run's records and weights."""
    import ivln_ce.training.trainer as trainer

    def args(out):
        return latent(tiny_benchmark, out, "train.update_size=2", "train.epochs=2", "train.num_envs=1", "train.val_split=val_seen",
                      "train.val_ablations=[none]", f"train.out_dir={out}")

    torch.set_num_threads(1)
    full = train(load_config(None, args(tmp_path / "full")), show_progress=False)
    train_until_first_epoch(load_config(None, args(tmp_path / "cut")), monkeypatch)
    shard = tmp_path / "cut" / "val_store" / "rank0.data"
    if store == "deleted":
        import shutil

        shutil.rmtree(shard.parent)
    elif store == "damaged":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    before = shard.stat().st_mtime_ns if shard.exists() else None
    calls = []
    real_collect = trainer._collect_validation
    monkeypatch.setattr(trainer, "_collect_validation", lambda *a, **k: calls.append(1) or real_collect(*a, **k))
    resumed = train(load_config(None, args(tmp_path / "cut")), show_progress=False)
    assert resumed["resumed"] is True
    if store == "intact":
        assert calls == [] and shard.stat().st_mtime_ns == before
    else:
        assert calls == [1]
    assert len(full["validation"]) == 2 and resumed["validation"] == full["validation"]
    assert set(full["validation"][0]["ablations"]) == {"none"}
    a = read_checkpoint(tmp_path / "full" / "ckpt.1.pth")["state_dict"]
    b = read_checkpoint(tmp_path / "cut" / "ckpt.1.pth")["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("setting", ["bn_train_mode", "actions_only_store"])
def test_validation_changes_nothing_trained_under_t3_or_an_actions_only_store(tiny_benchmark, tmp_path, setting):
    """Under T3 collecting the validation split in train mode would move the frozen trunk's
    BatchNorm statistics (and draw from the RNG); they are restored, so every tensor of the
    checkpoint equals the run's without validation. With an actions-only training store the
    validation store still holds observations, and scores every epoch."""
    torch.set_num_threads(1)
    extra = ["train.bn_train_mode=true"] if setting == "bn_train_mode" else ["train.store_observations=false"]
    common = ["train.update_size=2", "train.epochs=2", "train.num_envs=1", *extra]
    out, plain = tmp_path / "val", tmp_path / "plain"
    summary = train(load_config(None, latent(tiny_benchmark, out, *common, "train.val_split=val_seen", f"train.out_dir={out}")),
                    show_progress=False)
    train(load_config(None, latent(tiny_benchmark, plain, *common, f"train.out_dir={plain}")), show_progress=False)
    assert [r["epoch"] for r in summary["validation"]] == [0, 1]
    assert all(0 <= r["action_accuracy"] <= 1 and math.isfinite(r["action_loss"]) for r in summary["validation"])
    a = read_checkpoint(out / "ckpt.1.pth")["state_dict"]
    b = read_checkpoint(plain / "ckpt.1.pth")["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    if setting == "bn_train_mode":
        assert any("running_mean" in k for k in a)  # the statistics the validation collection would have moved


def test_a_validation_split_that_cannot_be_read_is_refused_naming_the_setting(tiny_benchmark, tmp_path):
    out = tmp_path / "x"
    with pytest.raises(ConfigError, match="train.val_split=val_nowhere"):
        train(load_config(None, latent(tiny_benchmark, out, "train.val_split=val_nowhere", f"train.out_dir={out}")),
              show_progress=False)
    assert not (out / "ivln_run.json").exists() and not (out / "store").exists()  # refused before the folder is claimed
