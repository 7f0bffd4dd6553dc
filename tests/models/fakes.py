"""Fake official files for the model tests, written independently of the model code: key
names and shapes generated from SPEC §1.9, a stand-in habitat/yacs configuration class that is
importable only while a file is being written, and malicious pickle payloads."""

from __future__ import annotations

import builtins
import os
import sys
import types
from contextlib import contextmanager

import torch


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


def torchvision_resnet18(prefix=""):
    """torchvision ``resnet18`` keys (BasicBlock), ``fc`` included."""
    k = {f"{prefix}conv1.weight": [64, 3, 7, 7], **bn(f"{prefix}bn1", 64)}
    inplanes = 64
    for L, planes in enumerate([64, 128, 256, 512], start=1):
        for b in range(2):
            p = f"{prefix}layer{L}.{b}"
            cin = inplanes if b == 0 else planes
            k[f"{p}.conv1.weight"] = [planes, cin, 3, 3]
            k.update(bn(f"{p}.bn1", planes))
            k[f"{p}.conv2.weight"] = [planes, planes, 3, 3]
            k.update(bn(f"{p}.bn2", planes))
            if b == 0 and L > 1:
                k[f"{p}.downsample.0.weight"] = [planes, cin, 1, 1]
                k.update(bn(f"{p}.downsample.1", planes))
        inplanes = planes
    k.update({f"{prefix}fc.weight": [1000, 512], f"{prefix}fc.bias": [1000]})
    return k


def ddppo_file_keys():
    keys = {f"actor_critic.net.visual_encoder.{k}": v for k, v in ddppo_backbone("backbone").items()}
    keys["actor_critic.net.visual_encoder.compression.0.weight"] = [128, 1024, 3, 3]
    keys.update(gn("actor_critic.net.visual_encoder.compression.1", 128))
    keys.update({"actor_critic.critic.fc.weight": [1, 512], "actor_critic.net.state_encoder.rnn.weight_ih_l0": [1536, 2112]})
    return keys


# --------------------------------------------------------------------------- pickled configs


def _config_classes():
    """A yacs-like ``CfgNode`` (a dict subclass that keeps flags in ``__dict__``) and habitat's
    ``Config`` subclass, named as in the real packages."""

    class CfgNode(dict):
        def __init__(self, init_dict=None, key_list=None, new_allowed=False):
            init_dict = dict(init_dict or {})
            for k, v in init_dict.items():
                if type(v) is dict:
                    init_dict[k] = type(self)(v, new_allowed=new_allowed)
            super().__init__(init_dict)
            self.__dict__["__immutable__"] = False
            self.__dict__["__deprecated_keys__"] = set()
            self.__dict__["__renamed_keys__"] = {}
            self.__dict__["__new_allowed__"] = new_allowed

        def __getattr__(self, name):
            if name in self:
                return self[name]
            raise AttributeError(name)

        def __setattr__(self, name, value):
            self[name] = value

        def freeze(self):
            self.__dict__["__immutable__"] = True
            for v in self.values():
                if isinstance(v, CfgNode):
                    v.freeze()

    class Config(CfgNode):
        pass

    CfgNode.__module__, CfgNode.__qualname__, CfgNode.__name__ = "yacs.config", "CfgNode", "CfgNode"
    Config.__module__, Config.__qualname__, Config.__name__ = "habitat.config.default", "Config", "Config"
    return CfgNode, Config


@contextmanager
def official_config_classes():
    """Yields (CfgNode, Config), importable under their real module names only inside the block:
    afterwards the modules are gone, as on a machine without habitat-lab or yacs."""
    CfgNode, Config = _config_classes()
    names = ("yacs", "yacs.config", "habitat", "habitat.config", "habitat.config.default")
    saved = {n: sys.modules.get(n) for n in names}
    for n in names:
        sys.modules[n] = types.ModuleType(n)
    sys.modules["yacs.config"].CfgNode = CfgNode
    sys.modules["habitat.config.default"].Config = Config
    try:
        yield CfgNode, Config
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def official_config(Config, CfgNode, extra=None):
    """A nested habitat-style config: nodes of both classes, frozen (flags in ``__dict__``)."""
    cfg = Config({"MODEL": {"policy_name": "MapCMAPolicy", "PROGRESS_MONITOR": {"use": True, "alpha": 1.0}},
                  "IL": {"DAGGER": {"p": 0.75, "iterations": 10}}, "SEED": 100, "SENSORS": ["RGB_SENSOR", "DEPTH_SENSOR"]})
    cfg["TASK_CONFIG"] = CfgNode({"DATASET": {"SPLIT": "train", "SCENES": ("a", "b")}})
    if extra:
        cfg["MODEL"].update(extra)
    cfg.freeze()
    return cfg


def save_official(path, body, config_extra=None, legacy=False):
    """``torch.save`` ``body`` plus a pickled habitat config under ``config``."""
    with official_config_classes() as (CfgNode, Config):
        obj = dict(body, config=official_config(Config, CfgNode, config_extra))
        torch.save(obj, path, _use_new_zipfile_serialization=not legacy)


# --------------------------------------------------------------------------- payloads


class SystemPayload:
    """Unpickles to ``os.system(command)`` (pickled as GLOBAL posix.system + REDUCE)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


class ExecPayload(SystemPayload):
    def __reduce__(self):
        return (builtins.exec, (f"open({self.marker!r}, 'w').close()",))


class EvalPayload(SystemPayload):
    def __reduce__(self):
        return (builtins.eval, (f"open({self.marker!r}, 'w').close()",))


PAYLOADS = {"posix.system": SystemPayload, "builtins.exec": ExecPayload, "builtins.eval": EvalPayload}
