"""Fake official files built from the key layouts of SPEC §1.9, written independently of the
model code (key names and shapes generated here), saved, and loaded with zero missing keys."""

import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="the models need torch")

from ivln_ce.models.cma import CMAPolicy  # noqa: E402
from ivln_ce.models.encoders import DepthEncoder  # noqa: E402
from ivln_ce.models.map_cma import MapCMAPolicy  # noqa: E402
from ivln_ce.models.official_weights import load_ddppo_depth_encoder, load_policy_checkpoint, load_rednet  # noqa: E402
from ivln_ce.models.rednet import RedNet  # noqa: E402


def bn(prefix, c):
    return {f"{prefix}.weight": [c], f"{prefix}.bias": [c], f"{prefix}.running_mean": [c], f"{prefix}.running_var": [c], f"{prefix}.num_batches_tracked": []}


def gn(prefix, c):
    return {f"{prefix}.weight": [c], f"{prefix}.bias": [c]}


def ddppo_backbone(prefix):
    k = {f"{prefix}.conv1.0.weight": [32, 1, 7, 7], **gn(f"{prefix}.conv1.1", 32)}
    inplanes = 32
    for L, (planes, blocks) in enumerate([(32, 3), (64, 4), (128, 6), (256, 3)], start=1):
        for b in range(blocks):
            p = f"{prefix}.layer{L}.{b}"
            cin = inplanes if b == 0 else planes * 4
            k[f"{p}.convs.0.weight"] = [planes, cin, 1, 1]
            k.update(gn(f"{p}.convs.1", planes))
            k[f"{p}.convs.3.weight"] = [planes, planes, 3, 3]
            k.update(gn(f"{p}.convs.4", planes))
            k[f"{p}.convs.6.weight"] = [planes * 4, planes, 1, 1]
            k.update(gn(f"{p}.convs.7", planes * 4))
            if b == 0:
                k[f"{p}.downsample.0.weight"] = [planes * 4, cin, 1, 1]
                k.update(gn(f"{p}.downsample.1", planes * 4))
        inplanes = planes * 4
    return k


def torchvision_resnet50(prefix, in_ch=3, names=("conv1", "bn1", "layer1", "layer2", "layer3", "layer4")):
    k = {f"{prefix}{names[0]}.weight": [64, in_ch, 7, 7], **bn(f"{prefix}{names[1]}", 64)}
    inplanes = 64
    for L, (planes, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for b in range(blocks):
            p = f"{prefix}{names[2 + L]}.{b}"
            cin = inplanes if b == 0 else planes * 4
            k[f"{p}.conv1.weight"] = [planes, cin, 1, 1]
            k.update(bn(f"{p}.bn1", planes))
            k[f"{p}.conv2.weight"] = [planes, planes, 3, 3]
            k.update(bn(f"{p}.bn2", planes))
            k[f"{p}.conv3.weight"] = [planes * 4, planes, 1, 1]
            k.update(bn(f"{p}.bn3", planes * 4))
            if b == 0:
                k[f"{p}.downsample.0.weight"] = [planes * 4, cin, 1, 1]
                k.update(bn(f"{p}.downsample.1", planes * 4))
        inplanes = planes * 4
    return k


def gru(prefix, cin, h=512):
    return {f"{prefix}.weight_ih_l0": [3 * h, cin], f"{prefix}.weight_hh_l0": [3 * h, h], f"{prefix}.bias_ih_l0": [3 * h], f"{prefix}.bias_hh_l0": [3 * h]}


def common_heads():
    k = {"net.instruction_encoder.embedding_layer.weight": [2504, 50]}
    for sfx in ("", "_reverse"):
        k.update({f"net.instruction_encoder.encoder_rnn.weight_ih_l0{sfx}": [512, 50], f"net.instruction_encoder.encoder_rnn.weight_hh_l0{sfx}": [512, 128],
                  f"net.instruction_encoder.encoder_rnn.bias_ih_l0{sfx}": [512], f"net.instruction_encoder.encoder_rnn.bias_hh_l0{sfx}": [512]})
    k.update(ddppo_backbone("net.depth_encoder.visual_encoder.backbone"))
    k["net.depth_encoder.visual_encoder.compression.0.weight"] = [128, 1024, 3, 3]
    k.update(gn("net.depth_encoder.visual_encoder.compression.1", 128))
    k["net.depth_encoder.spatial_embeddings.weight"] = [16, 64]
    k["net.prev_action_embedding.weight"] = [5, 32]
    k.update({"net.depth_linear.1.weight": [128, 3072], "net.depth_linear.1.bias": [128]})
    k.update({"net.state_q.weight": [256, 512], "net.state_q.bias": [256], "net.text_k.weight": [256, 256, 1], "net.text_k.bias": [256],
              "net.text_q.weight": [256, 256], "net.text_q.bias": [256], "net._scale": []})
    k.update({"net.second_state_compress.0.weight": [512, 1184], "net.second_state_compress.0.bias": [512]})
    k.update(gru("net.second_state_encoder.rnn", 512))
    k.update({"net.progress_monitor.weight": [1, 512], "net.progress_monitor.bias": [1],
              "action_distribution.linear.weight": [4, 512], "action_distribution.linear.bias": [4]})
    return k


def map_cma_keys():
    k = common_heads()
    for i, (cin, cout) in enumerate([(14, 32), (32, 64), (64, 128), (128, 128)]):
        k[f"net.map_encoder.cnn.{i}.conv.0.weight"] = [cout, cin, 7, 7]
        k[f"net.map_encoder.cnn.{i}.conv.0.bias"] = [cout]
        k.update(bn(f"net.map_encoder.cnn.{i}.conv.1", cout))
    k.update({"net.map_linear.1.weight": [256, 2048], "net.map_linear.1.bias": [256]})
    k.update(gru("net.state_encoder.rnn", 416))
    k.update({"net.dep_kv.weight": [384, 192, 1], "net.dep_kv.bias": [384], "net.map_kv.weight": [512, 128, 1], "net.map_kv.bias": [512]})
    return k


def latent_cma_keys(variant):
    k = common_heads()
    k.update(torchvision_resnet50("net.rgb_encoder.cnn.", names=("0", "1", "4", "5", "6", "7")))
    k["net.rgb_encoder.spatial_embeddings.weight"] = [16, 64]
    k.update({"net.rgb_linear.2.weight": [256, 2112], "net.rgb_linear.2.bias": [256]})
    k.update({"net.rgb_kv.weight": [512, 2112, 1], "net.rgb_kv.bias": [512], "net.depth_kv.weight": [384, 192, 1], "net.depth_kv.bias": [384]})
    k.update(gru("net.state_encoder.rnn", 928 if variant in ("poolcma", "poolendcma") else 416))
    if variant == "poolendcma":
        k.update({"net.out_layer.0.weight": [512, 1024], "net.out_layer.0.bias": [512]})
    return k


def rednet_keys():
    k = torchvision_resnet50("")
    k.update(torchvision_resnet50("", 1, names=("conv1_d", "bn1_d", "layer1_d", "layer2_d", "layer3_d", "layer4_d")))
    for i, (cin, cout) in enumerate([(64, 64), (256, 64), (512, 128), (1024, 256), (2048, 512)]):
        k[f"agant{i}.0.weight"] = [cout, cin, 1, 1]
        k.update(bn(f"agant{i}.1", cout))
    inplanes = 512
    for name, planes, blocks, up in (("deconv1", 256, 6, True), ("deconv2", 128, 4, True), ("deconv3", 64, 3, True), ("deconv4", 64, 3, True), ("final_conv", 64, 3, False)):
        for b in range(blocks):
            p = f"{name}.{b}"
            last = b == blocks - 1
            k[f"{p}.conv1.weight"] = [inplanes, inplanes, 3, 3]
            k.update(bn(f"{p}.bn1", inplanes))
            out = planes if last else inplanes
            k[f"{p}.conv2.weight"] = [inplanes, out, 3, 3] if (last and up) else [out, inplanes, 3, 3]
            k.update(bn(f"{p}.bn2", out))
            if last and up:
                k[f"{p}.upsample.0.weight"] = [inplanes, planes, 2, 2]
                k.update(bn(f"{p}.upsample.1", planes))
        inplanes = planes
    k.update({"final_deconv_custom.weight": [64, 13, 2, 2], "final_deconv_custom.bias": [13]})
    for i, c in ((5, 256), (4, 128), (3, 64), (2, 64)):
        k[f"out{i}_conv_custom.weight"] = [13, c, 1, 1]
        k[f"out{i}_conv_custom.bias"] = [13]
    return k


def fake_state(keys):
    g = torch.Generator().manual_seed(0)
    return {k: (torch.tensor(3) if k.endswith("num_batches_tracked") else torch.randn(shape, generator=g) if shape else torch.tensor(1 / 16)) for k, shape in keys.items()}


class OfficialConfig:  # pickled into the fake checkpoint from a module that will be gone
    def __init__(self):
        self.MODEL = {"policy_name": "MapCMAPolicy"}


def save_with_foreign_config(path, state):
    mod = types.ModuleType("habitat_fake_config")
    OfficialConfig.__module__ = mod.__name__
    mod.OfficialConfig = OfficialConfig
    sys.modules[mod.__name__] = mod
    try:
        torch.save({"state_dict": state, "config": OfficialConfig(), "optim_state": {}, "dagger_it": 0, "epoch": 3, "step_id": 100}, path)
    finally:
        del sys.modules[mod.__name__]  # the reader cannot import the class: it must stub it


@pytest.mark.parametrize("kind", ["mapcma", "cma", "tourcma", "poolcma", "poolendcma"])
def test_fake_official_policy_checkpoints_load_with_no_missing_keys(kind, tmp_path):
    keys = map_cma_keys() if kind == "mapcma" else latent_cma_keys(kind)
    policy = MapCMAPolicy() if kind == "mapcma" else CMAPolicy(variant=kind)
    own = {k: list(v.shape) for k, v in policy.state_dict().items()}
    assert own == keys  # the model's layout is exactly the official one
    state = fake_state(keys)
    path = tmp_path / "ckpt.7.pth"
    save_with_foreign_config(path, state)
    report = load_policy_checkpoint(policy, path)
    assert report.ok and report.loaded == len(keys)
    assert torch.equal(policy.state_dict()["net.state_q.weight"], state["net.state_q.weight"])


def test_fake_ddppo_depth_encoder_loads_strictly(tmp_path):
    keys = {f"actor_critic.net.visual_encoder.{k}": v for k, v in ddppo_backbone("backbone").items()}
    keys["actor_critic.net.visual_encoder.compression.0.weight"] = [128, 1024, 3, 3]
    keys.update(gn("actor_critic.net.visual_encoder.compression.1", 128))
    keys.update({"actor_critic.critic.fc.weight": [1, 512], "actor_critic.net.state_encoder.rnn.weight_ih_l0": [1536, 2112]})
    path = tmp_path / "gibson-2plus-resnet50.pth"
    torch.save({"state_dict": fake_state(keys), "model_args": None}, path)
    enc = DepthEncoder("resnet50")
    report = load_ddppo_depth_encoder(enc, path)
    assert report.ok and report.loaded == len(keys) - 2


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
