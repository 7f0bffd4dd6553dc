"""Fake official files built from the key layouts of SPEC §1.9, written independently of the
model code (key names and shapes generated in ``fakes``), saved with a pickled habitat config
whose classes are gone at load time, and loaded with zero missing keys."""

import pytest

torch = pytest.importorskip("torch", reason="the models need torch")

from ivln_ce.models.cma import CMAPolicy  # noqa: E402
from ivln_ce.models.encoders import DepthEncoder  # noqa: E402
from ivln_ce.models.map_cma import MapCMAPolicy  # noqa: E402
from ivln_ce.models.official_weights import (  # noqa: E402
    OfficialConfig,
    load_ddppo_depth_encoder,
    load_policy_checkpoint,
    load_rednet,
    read_checkpoint,
)
from ivln_ce.models.rednet import RedNet  # noqa: E402

from .fakes import ddppo_file_keys, fake_state, latent_cma_keys, map_cma_keys, rednet_keys, save_official  # noqa: E402


def test_the_official_config_comes_back_as_data(tmp_path):
    """A habitat ``Config`` is a yacs ``CfgNode``: a dict subclass pickled as NEWOBJ + SETITEMS
    (its items) + BUILD (its ``__dict__`` flags). With its modules absent, it loads as nested
    ``OfficialConfig`` dicts with the items and the flags, in both torch file formats."""
    import sys

    for legacy in (False, True):
        path = tmp_path / f"ckpt_{legacy}.pth"
        save_official(path, {"state_dict": {"w": torch.ones(2)}, "epoch": 3}, legacy=legacy)
        assert "habitat.config.default" not in sys.modules and "yacs.config" not in sys.modules
        ckpt = read_checkpoint(path)
        cfg = ckpt["config"]
        assert isinstance(cfg, OfficialConfig) and cfg.pickled_class == "habitat.config.default.Config"
        assert cfg.MODEL.policy_name == "MapCMAPolicy" and cfg["MODEL"]["PROGRESS_MONITOR"]["alpha"] == 1.0
        assert isinstance(cfg.IL.DAGGER, OfficialConfig) and cfg.IL.DAGGER.p == 0.75
        assert cfg.SENSORS == ["RGB_SENSOR", "DEPTH_SENSOR"] and cfg.TASK_CONFIG.DATASET.SCENES == ("a", "b")
        assert cfg.TASK_CONFIG.pickled_class == "yacs.config.CfgNode"
        assert cfg.state == {"__immutable__": True, "__deprecated_keys__": set(), "__renamed_keys__": {}, "__new_allowed__": False}
        assert cfg.to_dict()["IL"] == {"DAGGER": {"p": 0.75, "iterations": 10}}
        assert ckpt["epoch"] == 3 and torch.equal(ckpt["state_dict"]["w"], torch.ones(2))
        with pytest.raises(AttributeError, match="read-only"):
            cfg.SEED = 1


@pytest.mark.parametrize("kind", ["mapcma", "cma", "tourcma", "poolcma", "poolendcma"])
def test_fake_official_policy_checkpoints_load_with_no_missing_keys(kind, tmp_path):
    keys = map_cma_keys() if kind == "mapcma" else latent_cma_keys(kind)
    policy = MapCMAPolicy() if kind == "mapcma" else CMAPolicy(variant=kind)
    own = {k: list(v.shape) for k, v in policy.state_dict().items()}
    assert own == keys  # the model's layout is exactly the official one
    state = fake_state(keys)
    path = tmp_path / "ckpt.7.pth"
    save_official(path, {"state_dict": state, "optim_state": {}, "dagger_it": 0, "epoch": 3, "step_id": 100})
    report = load_policy_checkpoint(policy, path)
    assert report.ok and report.loaded == len(keys)
    assert torch.equal(policy.state_dict()["net.state_q.weight"], state["net.state_q.weight"])


@pytest.mark.parametrize("with_config", [False, True])
def test_fake_ddppo_depth_encoder_loads_strictly(tmp_path, with_config):
    keys = ddppo_file_keys()
    path = tmp_path / "gibson-2plus-resnet50.pth"
    state = fake_state(keys)
    if with_config:  # habitat-baselines' DD-PPO checkpoints carry the pickled config too
        save_official(path, {"state_dict": state, "extra_state": {"step": 2500000000}})
    else:
        torch.save({"state_dict": state, "model_args": None}, path)
    enc = DepthEncoder("resnet50")
    report = load_ddppo_depth_encoder(enc, path)
    assert report.ok and report.loaded == len(keys) - 2
    got = enc.visual_encoder.state_dict()["compression.0.weight"]
    assert torch.equal(got, state["actor_critic.net.visual_encoder.compression.0.weight"])


def test_fake_rednet_with_module_prefix_loads_strictly(tmp_path):
    keys = rednet_keys()
    model = RedNet()
    assert {k: list(v.shape) for k, v in model.state_dict().items()} == keys
    path = tmp_path / "rednet_mp3d_best_model.pkl"
    torch.save({"model_state": {f"module.{k}": v for k, v in fake_state(keys).items()}, "epoch": 10}, path)
    report = load_rednet(model, path)
    assert report.ok and report.loaded == len(keys)


def test_mismatches_are_reported(tmp_path):
    keys = map_cma_keys()
    state = fake_state(keys)
    state.pop("net.map_kv.bias")
    state["net.extra.weight"] = torch.zeros(2)
    path = tmp_path / "bad.pth"
    torch.save({"state_dict": state}, path)
    policy = MapCMAPolicy()
    with pytest.raises(ValueError, match=r"1 missing .*net.map_kv.bias.*1 unexpected .*net.extra.weight"):
        load_policy_checkpoint(policy, path)
    report = load_policy_checkpoint(policy, path, strict=False)
    assert report.missing == ["net.map_kv.bias"] and report.unexpected == ["net.extra.weight"]
    state["net.map_kv.bias"] = torch.zeros(7)
    state.pop("net.extra.weight")
    torch.save({"state_dict": state}, path)
    with pytest.raises(ValueError, match="shape mismatch"):
        load_policy_checkpoint(policy, path)
