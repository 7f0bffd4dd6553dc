"""The whole-sequence training forward (``CMANet.sequence``) against the per-step loop that
evaluation runs (``mode="step"``): logits, progress, action-head features, carried states and
the gradient of every parameter within 1e-5 relative, on the inputs that would break the
equality (resets inside the sequence, carried tour states, unequal lengths with padding, the
official switches), and a comparison that does catch a dropped, shifted or mis-masked step."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the models need torch")

from tests.models.test_policies import KINDS, make, observations  # noqa: E402

TOL = 1e-5
#: (kind, make() keywords): every policy, and the paper's TourCMA (h2 reset per episode)
VARIANTS = [(k, {}) for k in KINDS] + [("tourcma", {"reset_state_gru_per_episode": True})]
VARIANT_IDS = [k for k in KINDS] + ["tourcma-reset-h2"]


def _inputs(kind, T=9, N=4, seed=3, device="cpu"):
    """(T, N) inputs with agent resets (episode starts, oracle steps) and tour resets inside the
    sequence, not only at t = 0, and a previous action of -1 (none) here and there."""
    flat = observations(kind, T * N, seed=seed)
    obs = {k: v.view(T, N, *v.shape[1:]) for k, v in flat.items()}
    obs["instruction"] = flat["instruction"].view(T, N, -1)[:1].expand(T, N, -1)
    g = torch.Generator().manual_seed(seed + 1)
    prev = torch.randint(-1, 4, (T, N), generator=g)
    agent = (torch.rand(T, N, generator=g) > 0.25).float()
    tour = (torch.rand(T, N, generator=g) > 0.15).float()
    agent[0] = tour[0] = 0
    agent[T // 2, 1] = tour[T // 2, 1] = 0  # a tour starts inside column 1
    agent[T - 3, 2] = 0  # an episode starts inside column 2
    to = lambda x: x.to(device)  # noqa: E731
    return {k: to(v) for k, v in obs.items()}, to(prev), to(agent), to(tour)


def _run(policy, mode, obs, prev, agent, tour, h0=None, lengths=None):
    """Outputs and every parameter's gradient of a loss that reads every output."""
    policy.zero_grad(set_to_none=True)
    logits, progress, h, feats = policy.forward_sequence_features(obs, prev, agent, tour, h0, lengths, mode=mode)
    (logits.square().sum() + progress.sum() + feats.square().mean() + h.square().sum()).backward()
    grads = {n: p.grad.detach().clone() for n, p in policy.named_parameters() if p.grad is not None}
    return {"logits": logits.detach(), "progress": progress.detach(), "h": h.detach(), "features": feats.detach()}, grads


def worst(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| relative to max |b|."""
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max()) / max(float(b.abs().max()), 1e-30)


def assert_equal_runs(got, want, tol=TOL):
    (out_a, grads_a), (out_b, grads_b) = got, want
    for k in out_b:
        assert out_a[k].shape == out_b[k].shape, k
        assert worst(out_a[k], out_b[k]) <= tol, (k, worst(out_a[k], out_b[k]))
    assert grads_a.keys() == grads_b.keys() and len(grads_b) > 10
    scale = max(float(g.abs().max()) for g in grads_b.values())
    for n in grads_b:
        if theoretically_zero(n):
            # float rounding only: compared against the largest gradient of the model
            assert float((grads_a[n] - grads_b[n]).abs().max()) <= tol * scale, n
            assert float(grads_b[n].abs().max()) <= 1e-4 * scale, n  # and really near zero
        else:  # the norm of the difference: BatchNorm's backward cancels, single entries lose digits
            rel = float((grads_a[n] - grads_b[n]).norm()) / max(float(grads_b[n].norm()), 1e-30)
            assert rel <= tol, (n, rel)


def theoretically_zero(name: str) -> bool:
    """Gradients that are exactly 0 in exact arithmetic: ``text_k``'s bias shifts every attention
    logit of a query by the same amount, which softmax ignores, and a convolution's bias before
    a BatchNorm in train mode is removed by the batch mean (MAP-CMA's CoBRA blocks)."""
    return name == "net.text_k.bias" or (name.startswith("net.map_encoder.") and name.endswith(".conv.0.bias"))


@pytest.mark.parametrize("kind, kw", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("carry", ["fresh", "carried-true-ends", "carried-padded-ends"])
def test_whole_sequence_equals_the_step_loop(kind, kw, carry):
    """In train mode (MAP-CMA's BatchNorm uses batch statistics), with interior resets; with a
    carried tour state h0 and each column's true last step (``lengths``, the fixed T2) or the
    state after the padded steps (official T2)."""
    torch.manual_seed(0)
    p = make(kind, **kw).train()
    obs, prev, agent, tour = _inputs(kind)
    h0 = lengths = None
    if carry != "fresh":
        h0 = torch.randn(4, p.num_recurrent_layers, 512)
        if kind in ("poolcma", "poolendcma"):
            h0[:, 2] = h0[:, 2].abs()  # a tour memory is a running max of GRU outputs
    if carry == "carried-true-ends":
        lengths = torch.tensor([9, 3, 0, 1])  # a column without a step keeps h0
    assert_equal_runs(_run(p, "whole", obs, prev, agent, tour, h0, lengths), _run(p, "step", obs, prev, agent, tour, h0, lengths))


@pytest.mark.parametrize("kind", ["cma", "mapcma"])
@pytest.mark.parametrize("official_t1", [False, True], ids=["fixed", "official-t1"])
def test_training_losses_and_gradients_equal_on_a_padded_batch(kind, official_t1):
    """``batch_losses`` on collated episodes of unequal lengths (padding enters MAP-CMA's
    BatchNorm and, with the official T1 loss, the progress targets), each forward mode."""
    from ivln_ce.training.batching import collate
    from ivln_ce.training.trainer import batch_losses
    from tests.training.test_trainer import _synthetic_episodes

    torch.manual_seed(0)
    p = make(kind, pm_broadcast_bug=official_t1).train()
    lengths = (7, 3, 11, 5)
    eps = _synthetic_episodes(lengths, seed=2)
    rng = np.random.default_rng(0)
    for e in eps:
        if kind == "cma":
            e.steps["rgb_features"] = rng.random((e.length, 2048, 4, 4)).astype(np.float32)
            del e.steps["occupancy_map"], e.steps["semantic_map"]
    batch = collate(eps, 3.2)
    runs = {}
    for mode in ("whole", "step"):
        p.sequence_forward = mode
        p.zero_grad(set_to_none=True)
        losses = batch_losses(p, batch, 1.0, len(lengths), sum(lengths), 1)
        losses["loss"].backward()
        runs[mode] = ({k: v.detach().reshape(1) for k, v in losses.items()},
                      {n: q.grad.clone() for n, q in p.named_parameters() if q.grad is not None})
    assert runs["whole"][0]["correct"] == runs["step"][0]["correct"]
    assert_equal_runs(runs["whole"], runs["step"])


def _flip(t, idx):
    t = t.clone()
    t[idx] = 1 - t[idx]
    return t


MUTATIONS = {
    # an implementation that skipped step 4 of every column (and repeated the last one)
    "dropped-step": lambda o, pr, a, tm: ({k: (v if k == "instruction" else torch.cat([v[:4], v[5:], v[-1:]])) for k, v in o.items()},
                                          torch.cat([pr[:4], pr[5:], pr[-1:]]), a, tm),
    # previous actions read one step late
    "shifted-prev-action": lambda o, pr, a, tm: (o, torch.cat([pr[:1], pr[:-1]]), a, tm),
    # the observations read one step early
    "shifted-observation": lambda o, pr, a, tm: ({k: (v if k == "instruction" else torch.cat([v[1:], v[-1:]])) for k, v in o.items()}, pr, a, tm),
    # one agent mask wrong (a reset missed or invented at one step of one column)
    "mis-masked-agent": lambda o, pr, a, tm: (o, pr, _flip(a, (6, 2)), tm),
    # one tour mask wrong (TourCMA's first GRU resets with it; MAP-CMA does not read it)
    "mis-masked-tour": lambda o, pr, a, tm: (o, pr, a, _flip(tm, (4, 1))),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("kind", ["tourcma", "mapcma"])
def test_the_comparison_catches_a_dropped_shifted_or_mismasked_step(kind, mutation):
    """The equality above is not vacuous: feeding the whole-sequence path the inputs an
    implementation with one wrong step would see makes it fail the same comparison."""
    torch.manual_seed(0)
    p = make(kind).train()
    obs, prev, agent, tour = _inputs(kind)
    want = _run(p, "step", obs, prev, agent, tour)
    got = _run(p, "whole", *MUTATIONS[mutation](obs, prev, agent, tour))
    if kind == "mapcma" and mutation == "mis-masked-tour":
        assert_equal_runs(got, want)  # both MAP-CMA GRUs reset with the agent mask (SPEC 8.6)
        return
    with pytest.raises(AssertionError):
        assert_equal_runs(got, want)


def _forward_operator_calls(policy, kind, T, mode):
    from torch.profiler import ProfilerActivity, profile

    obs, prev, agent, _ = _inputs(kind, T=T, N=3)
    agent = torch.ones_like(agent)
    agent[0] = 0
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        policy.forward_sequence(obs, prev, agent, agent, mode=mode)
    return sum(1 for e in prof.events() if e.cpu_parent is None)


@pytest.mark.parametrize("kind", ["cma", "tourcma", "mapcma"])
def test_forward_operator_calls_do_not_grow_with_the_sequence_length(kind):
    """The whole-sequence forward dispatches the same operators at T = 8 and T = 32 (one GRU call
    per layer when only t = 0 resets); the step loop dispatches about T times its per-step count."""
    p = make(kind).train()
    whole = [_forward_operator_calls(p, kind, T, "whole") for T in (8, 32)]
    step = [_forward_operator_calls(p, kind, T, "step") for T in (8, 32)]
    assert whole[0] == whole[1], whole
    assert step[1] > 4 * step[0] * 0.8 and step[1] > 5 * whole[1], (step, whole)


def test_the_policy_follows_train_sequence_forward():
    from ivln_ce.config import PolicyConfig, TrainConfig
    from ivln_ce.models.factory import build_policy

    for mode in ("whole", "step"):
        policy, _ = build_policy(PolicyConfig(name="cma", depth_backbone="small", rgb_depth=18), 30, TrainConfig(sequence_forward=mode), seed=0)
        assert policy.sequence_forward == mode
    p = make("cma")
    with pytest.raises(ValueError, match="whole"):
        p.forward_sequence(*_inputs("cma")[:1], torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 1), torch.ones(2, 1), mode="scan")


def test_bf16_whole_sequence_stays_close_to_the_step_loop_with_fp32_recurrent_layers():
    from ivln_ce.models.precision import autocast

    torch.manual_seed(0)
    p = make("mapcma").train()
    obs, prev, agent, tour = _inputs("mapcma")
    with autocast("bf16", "cpu"):
        whole = p.forward_sequence(obs, prev, agent, tour, mode="whole")
        step = p.forward_sequence(obs, prev, agent, tour, mode="step")
    assert whole[2].dtype == step[2].dtype == torch.float32  # the recurrent states
    assert worst(whole[0].float(), step[0].float()) < 0.02


EMULATED_BF16 = textwrap.dedent("""
    import numpy as np, torch
    from ivln_ce.models.precision import native_bf16_cpu
    from tests.models.test_precision import test_bf16_training_loss_and_gradient_stay_close_to_fp32 as check
    assert not native_bf16_cpu(), "ONEDNN_MAX_CPU_ISA did not hide bf16"
    check()
    print("ok")
""")


def test_bf16_training_runs_on_a_cpu_without_native_bf16():
    """oneDNN limited to AVX2 (no AVX-512 BF16, no AMX: the machine of the first-hour report)
    has no bf16 recurrent primitive; the bf16 training step still runs and stays close to fp32,
    because the LSTM and GRUs run in float32."""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", EMULATED_BF16], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["mapcma", "poolcma", "tourcma"])
def test_whole_sequence_equals_the_step_loop_on_cuda(kind):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is false)")
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    p = make(kind).train().cuda()
    obs, prev, agent, tour = _inputs(kind, device="cuda")
    h0 = torch.randn(4, p.num_recurrent_layers, 512, device="cuda").abs()
    lengths = torch.tensor([9, 3, 5, 1], device="cuda")
    assert_equal_runs(_run(p, "whole", obs, prev, agent, tour, h0, lengths), _run(p, "step", obs, prev, agent, tour, h0, lengths))


def _map_encoder_runs(device, N=26, seed=0):
    """The map encoder's output and weight gradients (train mode, a fixed upstream gradient) in
    NCHW and channels-last float32, and in float64 NCHW (the reference)."""
    import copy

    from ivln_ce.models.encoders import MapEncoder, map_input

    torch.manual_seed(seed)
    enc = MapEncoder().train().to(device)
    occ = (torch.rand(N, 64, 64) < 0.3).float()
    x = map_input(occ, torch.randint(0, 13, (N, 64, 64))).to(device)
    up = torch.randn(N, 128, 16, device=device)
    seen = []
    enc.cnn[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last)))

    def run(m, inp, grad, on):
        m.channels_last = on
        m.zero_grad(set_to_none=True)
        y = m(inp)
        (y * grad).sum().backward()
        return y.detach().double(), {n: q.grad.double() for n, q in m.named_parameters()}

    ref = run(copy.deepcopy(enc).double(), x.double(), up.double(), False)
    return run(enc, x, up, False), run(enc, x, up, True), ref, seen


def _rel(a, b):
    return float((a - b).norm()) / max(float(b.norm()), 1e-30)


def test_channels_last_reaches_the_map_convolutions_and_keeps_the_forward():
    """The switch gives the first convolution a channels-last input; the forward stays within
    float rounding of float64 (on a CPU its weight gradients do not: the config refuses it)."""
    (y, _), (y_cl, _), (ref, _), seen = _map_encoder_runs("cpu")
    assert seen == [False, False, True]  # float64 reference, NCHW run, channels-last run
    assert _rel(y, ref) <= 1e-5 and _rel(y_cl, ref) <= 1e-5


@pytest.mark.cuda
def test_channels_last_map_encoder_gradients_on_cuda_match_float64():
    """On CUDA (TF32 off) the channels-last weight gradients are as close to a float64 reference
    as the NCHW ones (within 10x their error, or 1e-5 relative)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is false)")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    (y, g), (y_cl, g_cl), (ref, g_ref), seen = _map_encoder_runs("cuda")
    assert seen == [False, False, True]
    assert _rel(y_cl, ref) <= 1e-5
    for n in g_ref:
        assert _rel(g_cl[n], g_ref[n]) <= max(10 * _rel(g[n], g_ref[n]), 1e-5), (n, _rel(g_cl[n], g_ref[n]), _rel(g[n], g_ref[n]))
