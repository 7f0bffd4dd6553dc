"""``models.factory``: policies from ``policy.*`` / ``train.*``, weights in the documented order,
toolkit and official checkpoints told apart by content, one checkpoint writer, RedNet semantics."""

import gzip
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the models need torch")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.models.cma import CMAPolicy  # noqa: E402
from ivln_ce.models.factory import build_policy, load_checkpoint, load_segmenter, save_checkpoint  # noqa: E402
from ivln_ce.models.map_cma import MapCMAPolicy  # noqa: E402
from ivln_ce.models.official_weights import read_checkpoint  # noqa: E402
from ivln_ce.models.rednet import RedNet, RedNetSegmenter, normalise_inputs  # noqa: E402

from .fakes import ddppo_file_keys, fake_state, map_cma_keys, save_official, torchvision_resnet18  # noqa: E402

VOCAB = 12
OFFICIAL = str(Path(__file__).resolve().parents[2] / "configs" / "profiles" / "official.yaml")


def cfg(*overrides, profile=None):
    return load_config(profile, list(overrides))


def glove(tmp_path, rows=VOCAB):
    table = [[0.0] * 50] + [[(i * 7 + j) % 11 / 10 + 0.05 for j in range(50)] for i in range(1, rows)]
    path = tmp_path / "embeddings.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(table, fh)
    return path, torch.tensor(table)


@pytest.mark.parametrize("name,variant,layers", [("cma", "cma", 2), ("tour_cma", "tourcma", 2), ("pool_cma", "poolcma", 3),
                                                  ("pool_end_cma", "poolendcma", 3), ("map_cma", None, 2)])
def test_each_name_builds_its_model_with_glove(tmp_path, name, variant, layers):
    path, table = glove(tmp_path)
    c = cfg(f"policy.name={name}", "policy.depth_backbone=small", "policy.rgb_depth=18", f"policy.embeddings={path}")
    policy, reports = build_policy(c.policy, VOCAB, c.train)
    assert reports == []
    assert isinstance(policy, MapCMAPolicy) if variant is None else (type(policy) is CMAPolicy and policy.net.variant == variant)
    assert policy.num_recurrent_layers == layers
    emb = policy.net.instruction_encoder.embedding_layer.weight
    assert torch.equal(emb, table) and not emb.requires_grad


def test_switches_follow_the_config_and_the_official_profile(tmp_path):
    pred, target, valid = torch.tensor([0.1, 0.5, 0.9, 0.3]), torch.tensor([0.0, 0.5, 1.0, 1.0]), torch.tensor([True, True, True, False])
    fixed_loss = (0.1**2 + 0 + 0.1**2) / 3
    official_loss = sum((p - t) ** 2 for p in (0.1, 0.5, 0.9) for t in (0.0, 0.5, 1.0, 1.0)) / 12
    for profile, bug in ((None, False), (OFFICIAL, True)):
        c = cfg("policy.name=tour_cma", "policy.depth_backbone=small", "policy.rgb_depth=18", profile=profile)
        policy, _ = build_policy(c.policy, VOCAB, c.train)
        assert policy.bn_train_mode is bug and policy.pm_broadcast_bug is bug
        assert policy.net.reset_state_gru_per_episode is False  # T11: official in both profiles
        assert policy.progress_loss(pred, target, valid).item() == pytest.approx(official_loss if bug else fixed_loss)
        # T3: collecting with the official defect runs the frozen RGB trunk's BatchNorm in train mode
        policy.collection_mode()
        assert policy.net.rgb_encoder.cnn[1].training is bug and policy.training is bug
        policy.train()
        assert policy.net.rgb_encoder.cnn[1].training is bug  # the fixed trunk stays in eval mode
    c = cfg("policy.name=tour_cma", "policy.depth_backbone=small", "policy.rgb_depth=18", "policy.reset_state_gru_per_episode=true")
    assert build_policy(c.policy, VOCAB)[0].net.reset_state_gru_per_episode is True
    c = cfg("policy.name=map_cma", "policy.depth_backbone=small", "train.bn_train_mode=true")
    m = build_policy(c.policy, VOCAB, c.train)[0].collection_mode()
    assert m.net.map_encoder.cnn[0].conv[1].training


def test_weights_load_in_order_and_the_checkpoint_wins(tmp_path):
    ddppo = tmp_path / "ddppo.pth"
    ddppo_state = fake_state(ddppo_file_keys())
    save_official(ddppo, {"state_dict": ddppo_state})
    rgb = tmp_path / "resnet18.pth"
    rgb_state = fake_state(torchvision_resnet18())
    torch.save(rgb_state, rgb)  # torchvision files are a bare state dict
    c = cfg("policy.name=cma", "policy.rgb_depth=18", f"policy.ddppo_weights={ddppo}", f"policy.rgb_weights={rgb}")
    policy, reports = build_policy(c.policy, VOCAB, c.train)
    assert [r.ok for r in reports] == [True, True] and str(ddppo) in reports[0].source and str(rgb) in reports[1].source
    assert reports[1].loaded == len(rgb_state) - 2  # fc dropped
    net = policy.net
    assert torch.equal(net.depth_encoder.visual_encoder.compression[0].weight, ddppo_state["actor_critic.net.visual_encoder.compression.0.weight"])
    assert torch.equal(net.rgb_encoder.cnn[5][0].downsample[1].running_var, rgb_state["layer2.0.downsample.1.running_var"])
    assert torch.equal(net.rgb_encoder.cnn[0].weight, rgb_state["conv1.weight"])
    # a toolkit checkpoint written by save_checkpoint, then loaded last over fresh pretrained weights
    with torch.no_grad():
        net.state_q.weight.fill_(0.25)
        net.depth_encoder.visual_encoder.compression[0].weight.fill_(-1.0)
    ck = save_checkpoint(tmp_path / "run" / "ckpt.3.pth", policy, {"policy": {"name": "cma"}, "seed": 1}, {"state": {}, "param_groups": []}, dagger_it=1, epoch=3)
    c2 = cfg("policy.name=cma", "policy.rgb_depth=18", f"policy.ddppo_weights={ddppo}", f"policy.rgb_weights={rgb}", f"policy.checkpoint={ck}")
    again, reports = build_policy(c2.policy, VOCAB, c2.train)
    assert len(reports) == 3 and reports[2].ok and "toolkit checkpoint" in reports[2].source
    assert torch.all(again.net.state_q.weight == 0.25) and torch.all(again.net.depth_encoder.visual_encoder.compression[0].weight == -1.0)


def test_save_checkpoint_writes_the_container_atomically(tmp_path):
    policy = MapCMAPolicy(VOCAB, depth_backbone="small")
    path = save_checkpoint(tmp_path / "ckpt.5.pth", policy, {"policy": {"name": "map_cma"}, "lr": 2.5e-4}, None, epoch=5, step_id=40)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.5.pth"]
    ckpt = read_checkpoint(path)
    assert sorted(ckpt) == ["config", "dagger_it", "epoch", "optim_state", "state_dict", "step_id"]
    assert (ckpt["dagger_it"], ckpt["epoch"], ckpt["step_id"]) == (0, 5, 40) and type(ckpt["config"]) is dict
    assert ckpt["config"] == {"policy": {"name": "map_cma"}, "lr": 2.5e-4}
    with pytest.raises(TypeError, match="epochs"):
        save_checkpoint(tmp_path / "x.pth", policy, {}, epochs=1)
    with pytest.raises(ValueError, match="JSON"):
        save_checkpoint(tmp_path / "x.pth", policy, {"f": lambda: 0})
    with pytest.raises(ValueError, match=r"ckpt\.5\.pth.*'map_cma' policy.*'cma'"):
        load_checkpoint(CMAPolicy("cma", VOCAB, depth_backbone="small", rgb_depth=18), path, "cma")
    assert not (tmp_path / "x.pth").exists()


def test_an_official_checkpoint_is_recognised_and_loaded(tmp_path):
    path = tmp_path / "ckpt.MapCMA.pth"
    state = fake_state(map_cma_keys())
    save_official(path, {"state_dict": state, "optim_state": {}, "epoch": 9, "step_id": 3})
    c = cfg("policy.name=map_cma", f"policy.checkpoint={path}")
    policy, reports = build_policy(c.policy, 2504, c.train)
    assert reports[0].ok and "official checkpoint" in reports[0].source
    assert torch.equal(policy.state_dict()["net.map_kv.weight"], state["net.map_kv.weight"])


def test_errors_name_the_key_and_the_file(tmp_path):
    path, _ = glove(tmp_path, rows=5)
    with pytest.raises(ValueError, match=r"policy.embeddings: .*embeddings.json.gz: 5 rows.* 12 words"):
        build_policy(cfg("policy.name=map_cma", "policy.depth_backbone=small", f"policy.embeddings={path}").policy, VOCAB)
    for key in ("embeddings", "ddppo_weights", "rgb_weights"):
        with pytest.raises(FileNotFoundError, match=rf"policy.{key}: .*missing.pth"):
            build_policy(cfg("policy.name=cma", "policy.depth_backbone=small", "policy.rgb_depth=18", f"policy.{key}={tmp_path}/missing.pth").policy, VOCAB)
    with pytest.raises(FileNotFoundError, match=r"policy.checkpoint: .*nope"):
        build_policy(cfg("policy.name=map_cma", "policy.depth_backbone=small", f"policy.checkpoint={tmp_path}/nope").policy, VOCAB)
    with pytest.raises(ValueError, match="map_cma has no RGB encoder"):
        build_policy(cfg("policy.name=map_cma", "policy.depth_backbone=small", f"policy.rgb_weights={path}").policy, VOCAB)
    with pytest.raises(ValueError, match="policy.ddppo_weights: .*resnet50"):
        build_policy(cfg("policy.name=map_cma", "policy.depth_backbone=small", f"policy.ddppo_weights={path}").policy, VOCAB)
    with pytest.raises(ValueError, match="not a learned policy"):
        build_policy(cfg().policy, VOCAB)
    # a folder of checkpoints is the evaluator's to iterate: building does not load it
    policy, reports = build_policy(cfg("policy.name=map_cma", "policy.depth_backbone=small", f"policy.checkpoint={tmp_path}").policy, VOCAB)
    assert reports == []


@pytest.mark.slow
def test_a_checkpoint_trained_with_another_architecture_is_refused_with_the_key_named(tmp_path):
    from ivln_ce.config import resolved

    trained = cfg("policy.name=cma", "policy.depth_backbone=small", "policy.rgb_depth=18")
    policy, _ = build_policy(trained.policy, VOCAB)
    ck = save_checkpoint(tmp_path / "ckpt.0.pth", policy, resolved(trained))
    with pytest.raises(ValueError, match=r"ckpt.0.pth: the checkpoint was trained with policy.rgb_depth=18, but the config says 50"):
        build_policy(cfg("policy.name=cma", "policy.depth_backbone=small", f"policy.checkpoint={ck}").policy, VOCAB)
    with pytest.raises(ValueError, match=r"policy.depth_backbone=small, but the config says resnet50"):
        build_policy(cfg("policy.name=cma", "policy.rgb_depth=18", f"policy.checkpoint={ck}").policy, VOCAB)
    again, reports = build_policy(cfg("policy.name=cma", "policy.depth_backbone=small", "policy.rgb_depth=18",
                                      f"policy.checkpoint={ck}").policy, VOCAB)
    assert len(reports) == 1 and all(torch.equal(a, b) for a, b in zip(policy.state_dict().values(), again.state_dict().values()))
    # MAP-CMA has no RGB trunk: rgb_depth does not concern it
    trained = cfg("policy.name=map_cma", "policy.depth_backbone=small", "policy.rgb_depth=18")
    policy, _ = build_policy(trained.policy, VOCAB)
    ck = save_checkpoint(tmp_path / "ckpt.1.pth", policy, resolved(trained))
    build_policy(cfg("policy.name=map_cma", "policy.depth_backbone=small", f"policy.checkpoint={ck}").policy, VOCAB)


def test_load_segmenter(tmp_path):
    assert load_segmenter(cfg().mapping) is None  # GT semantics
    model = RedNet(depth=18)
    path = tmp_path / "rednet.pth"
    torch.save({"model_state": {f"module.{k}": v for k, v in model.state_dict().items()}, "epoch": 3}, path)
    seg = load_segmenter(cfg("mapping.semantics=rednet", f"mapping.rednet_checkpoint={path}", "mapping.rednet_depth=18").mapping)
    assert isinstance(seg, RedNetSegmenter) and seg.load_report.ok
    g = torch.Generator().manual_seed(0)
    rgb, depth = torch.randint(0, 256, (2, 32, 32, 3), dtype=torch.uint8, generator=g), torch.rand(2, 32, 32, 1, generator=g)
    with torch.no_grad():
        want = model.eval()(*normalise_inputs(rgb, depth)).argmax(1)
    assert torch.equal(seg(rgb, depth).long(), want)  # the file's weights, not a fresh initialisation
    with pytest.raises(ValueError, match="mapping.rednet_depth=34"):
        load_segmenter(cfg("mapping.semantics=rednet", f"mapping.rednet_checkpoint={path}", "mapping.rednet_depth=34").mapping)
    with pytest.raises(FileNotFoundError, match="mapping.rednet_checkpoint: .*absent"):
        load_segmenter(cfg("mapping.semantics=rednet", f"mapping.rednet_checkpoint={tmp_path}/absent.pkl").mapping)
