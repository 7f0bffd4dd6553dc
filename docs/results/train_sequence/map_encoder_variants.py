import torch, time
from ivln_ce.models.encoders import MapEncoder
torch.manual_seed(0)
def bench(n, cl, prec, steps=5):
    enc = MapEncoder().cuda().train()
    x = torch.randn(n, 14, 64, 64, device="cuda")
    if cl:
        enc = enc.to(memory_format=torch.channels_last); x = x.contiguous(memory_format=torch.channels_last)
    ts = []
    for i in range(steps + 2):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        with torch.autocast("cuda", torch.bfloat16, enabled=prec == "bf16"):
            y = enc(x)
        y.float().square().mean().backward()
        torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    return sorted(ts[2:])[len(ts[2:]) // 2] * 1e3
for tf32 in (True, False):
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    for cl in (False, True):
        for prec in ("fp32", "bf16"):
            ms = bench(5052, cl, prec)
            print(f"map encoder fwd+bwd over 5052 maps (B=64 T=105 valid steps): tf32={tf32} channels_last={cl} {prec}: {ms:.1f} ms -> {5052 / ms * 1e3:.0f} maps/s", flush=True)
