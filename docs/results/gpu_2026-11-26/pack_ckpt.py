"""Pack a toolkit checkpoint for the trip back from the device: drop tensors equal to the
seeded initialisation (frozen random encoders; verified by sha256 on unpack) and the optimizer
state, then split into <=15 MiB parts.  unpack: pack_ckpt.py unpack PREFIX OUT.pth"""
import hashlib, io, sys, glob
import torch
from omegaconf import OmegaConf
from ivln_ce.models.factory import build_policy

def digest(t):
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()

def init_state(config, vocab):
    from ivln_ce.config import PolicyConfig, TrainConfig
    pc = OmegaConf.merge(OmegaConf.structured(PolicyConfig), {**config["policy"], "checkpoint": ""})
    tc = OmegaConf.merge(OmegaConf.structured(TrainConfig), config["train"])
    pol, _ = build_policy(pc, vocab, tc, "cpu", seed=int(config["seed"]))
    return pol.state_dict()

def vocab_of(sd):
    return next(v.shape[0] for k, v in sd.items() if k.endswith("embedding_layer.weight"))

if sys.argv[1] == "pack":
    ck = torch.load(sys.argv[2], map_location="cpu", weights_only=True)
    sd = ck["state_dict"]
    init = init_state(ck["config"], vocab_of(sd))
    keep, dropped = {}, {}
    for k, v in sd.items():
        if k in init and init[k].shape == v.shape and torch.equal(init[k], v.cpu()):
            dropped[k] = digest(v)
        else:
            keep[k] = v.cpu()
    meta = {k: v for k, v in ck.items() if k not in ("state_dict", "optim_state")}
    buf = io.BytesIO(); torch.save({"keep": keep, "dropped": dropped, "meta": meta}, buf)
    data = buf.getvalue(); step = 15 * 2**20
    for i in range(0, len(data), step):
        with open(f"{sys.argv[3]}.part{i // step:02d}", "wb") as fh:
            fh.write(data[i:i + step])
    print(f"packed {sys.argv[2]}: kept {len(keep)} tensors, dropped {len(dropped)} equal to the seeded init, {len(data)/2**20:.1f} MiB")
else:
    data = b"".join(open(p, "rb").read() for p in sorted(glob.glob(sys.argv[2] + ".part*")))
    obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    meta = obj["meta"]
    init = init_state(meta["config"], vocab_of(obj["keep"]))
    sd = {}
    for k in init:
        if k in obj["keep"]:
            sd[k] = obj["keep"][k]
        else:
            assert digest(init[k]) == obj["dropped"][k], f"{k}: the seeded init here differs from the device's"
            sd[k] = init[k]
    assert set(sd) == set(obj["keep"]) | set(obj["dropped"])
    torch.save({"state_dict": sd, "config": meta["config"], "optim_state": None, **{c: meta[c] for c in ("dagger_it", "epoch", "step_id")}}, sys.argv[3])
    print(f"unpacked {sys.argv[3]}: {len(obj['keep'])} tensors from the device, {len(obj['dropped'])} rebuilt and verified")
