"""Checkpoints can only produce data: real malicious pickles (``os.system``, ``exec``, ``eval``
REDUCE payloads, at the top level and nested inside the pickled habitat config) are refused by
every reader, with an error naming the file and the refused global, and have no side effect."""

import pytest

torch = pytest.importorskip("torch", reason="the models need torch")

from ivln_ce.models.encoders import DepthEncoder  # noqa: E402
from ivln_ce.models.map_cma import MapCMAPolicy  # noqa: E402
from ivln_ce.models.official_weights import (  # noqa: E402
    UnsafeCheckpointError,
    load_ddppo_depth_encoder,
    load_policy_checkpoint,
    load_rednet,
    read_checkpoint,
)
from ivln_ce.models.rednet import RedNet  # noqa: E402

from .fakes import PAYLOADS, save_official  # noqa: E402


def _evil_files(tmp_path, name, marker):
    """(label, path) of files carrying the payload: the whole object, a top-level entry, and
    a value inside the pickled config; zip and legacy torch formats. Pickle protocol 2 (torch's
    default: Python 2 names such as ``__builtin__.exec``), 3 (``builtins.exec``; the old
    loader's prefix check let that one run) and 4 (STACK_GLOBAL)."""
    payload = PAYLOADS[name](marker)
    out = []
    for legacy in (False, True):
        for proto in (2, 3, 4):
            fmt = f"{'legacy' if legacy else 'zip'}, protocol {proto}"
            kw = dict(_use_new_zipfile_serialization=not legacy, pickle_protocol=proto)
            p = tmp_path / f"top_{legacy}_{proto}.pth"
            torch.save(payload, p, **kw)
            out.append((f"top-level object, {fmt}", p))
            p = tmp_path / f"entry_{legacy}_{proto}.pth"
            torch.save({"state_dict": {"w": torch.zeros(1)}, "epoch": payload}, p, **kw)
            out.append((f"top-level entry, {fmt}", p))
            if proto == 2:  # torch.save's protocol, as the official files were written
                p = tmp_path / f"config_{legacy}.pth"
                save_official(p, {"state_dict": {"w": torch.zeros(1)}, "model_state": {}}, config_extra={"HOOK": payload}, legacy=legacy)
                out.append((f"inside config, {fmt}", p))
    return out


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_malicious_pickles_are_refused_without_side_effects(tmp_path, name):
    marker = tmp_path / "PWNED"
    files = _evil_files(tmp_path, name, marker)
    assert not marker.exists()  # saving did not trigger the payload
    policy, encoder, rednet = MapCMAPolicy(depth_backbone="small", vocab_size=10), DepthEncoder("small"), RedNet(depth=18)
    readers = {
        "read_checkpoint": read_checkpoint,
        "policy": lambda p: load_policy_checkpoint(policy, p),
        "ddppo": lambda p: load_ddppo_depth_encoder(encoder, p),
        "rednet": lambda p: load_rednet(rednet, p),
    }
    for label, path in files:
        for reader_name, reader in readers.items():
            with pytest.raises(UnsafeCheckpointError) as err:
                reader(path)
            msg = str(err.value)
            assert str(path) in msg and (f"global {name!r}" in msg or f"global(s) ['{name}']" in msg), (label, reader_name, msg)
            assert not marker.exists(), (label, reader_name)


def test_the_known_maps_command_refuses_a_malicious_rednet_file(tmp_path, capsys):
    from ivln_ce.cli import main

    marker = tmp_path / "PWNED"
    evil = tmp_path / "rednet.pkl"
    torch.save({"model_state": PAYLOADS["builtins.eval"](marker)}, evil, pickle_protocol=3)
    scene = tmp_path / "house.glb"
    scene.write_bytes(b"")  # never opened: the checkpoint is read first
    code = main(["known-maps", str(scene), "--out", str(tmp_path / "km"), "--method", "visit", "--rednet", str(evil), "--rednet-depth", "18"])
    err = capsys.readouterr().err
    assert code == 2 and str(evil) in err and "builtins.eval" in err
    assert not marker.exists()


def test_plain_data_checkpoints_still_load(tmp_path):
    """The allow-list admits what real checkpoints hold: tensors, containers, numpy scalars."""
    import numpy as np

    path = tmp_path / "ok.pth"
    body = {"state_dict": {"w": torch.arange(3.0)}, "epoch": np.int64(7), "miou": np.float32(0.5), "history": [{"loss": 1.5}], "betas": (0.9, 0.999), "tags": {"a"}}
    torch.save(body, path)
    got = read_checkpoint(path)
    assert got["epoch"] == 7 and got["miou"] == np.float32(0.5) and got["history"] == [{"loss": 1.5}] and got["betas"] == (0.9, 0.999)
    assert got["tags"] == {"a"} and torch.equal(got["state_dict"]["w"], torch.arange(3.0))
    torch.save([1, 2], path)
    with pytest.raises(ValueError, match=r"ok\.pth: expected a dict"):
        read_checkpoint(path)
    with pytest.raises(FileNotFoundError, match="nothing.pth"):
        read_checkpoint(tmp_path / "nothing.pth")
