"""train.precision / eval.precision: fp32 changes nothing; bf16 autocast really runs in bfloat16,
keeps weights, GRU state and losses in float32, and stays close to the fp32 computation."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the models need torch")

from ivln_ce.models.cma import PolicyState  # noqa: E402
from ivln_ce.models.precision import autocast  # noqa: E402
from tests.models.test_policies import KINDS, make, observations  # noqa: E402


def _sequence(kind, T=6, N=3):
    flat = observations(kind, T * N, seed=3)
    obs = {k: v.view(T, N, *v.shape[1:]) for k, v in flat.items()}
    obs["instruction"] = flat["instruction"].view(T, N, -1)[:1].expand(T, N, -1)
    prev = torch.randint(-1, 4, (T, N), generator=torch.Generator().manual_seed(1))
    masks = torch.ones(T, N, dtype=torch.bool)
    masks[0] = False
    return obs, prev, masks


def test_fp32_is_the_plain_computation_bit_for_bit():
    p = make("mapcma")
    obs, prev, masks = _sequence("mapcma")
    plain = p.forward_sequence(obs, prev, masks, masks)
    with autocast("fp32", "cpu"):
        same = p.forward_sequence(obs, prev, masks, masks)
    for a, b in zip(plain, same):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind", KINDS)
def test_bf16_runs_in_bfloat16_keeps_the_state_fp32_and_stays_close(kind):
    p = make(kind)
    with torch.no_grad():  # logits of a realistic size, so bf16 rounding shows
        p.action_distribution.linear.weight.mul_(200.0)
    obs, prev, masks = _sequence(kind)
    logits32, prog32, h32 = p.forward_sequence(obs, prev, masks, masks)
    with autocast("bf16", "cpu"):
        logits16, prog16, h16 = p.forward_sequence(obs, prev, masks, masks)
    assert logits16.dtype == torch.bfloat16  # the heads really ran in bf16
    assert h16.dtype == torch.float32  # the recurrent state did not
    diff = (logits16.float() - logits32).abs().max().item()
    scale = logits32.abs().max().item()
    assert 0 < diff <= 0.05 * scale, (diff, scale)  # bf16 has 8 bits of mantissa: ~0.4 % per rounding
    assert (logits16.float().argmax(-1) == logits32.argmax(-1)).float().mean() >= 0.8
    assert all(t.dtype == torch.float32 for t in p.parameters())


def test_bf16_act_keeps_the_stored_hidden_state_fp32():
    p = make("cma")
    obs, _, masks = _sequence("cma", T=3, N=2)
    state = PolicyState()
    with autocast("bf16", "cpu"):
        for t in range(3):
            a, _, state = p.act({k: v[t] for k, v in obs.items()}, state, ["a", "b"], ~masks[t], torch.tensor([t == 0] * 2))
            state.record_actions(["a", "b"], a.tolist())
    assert all(h.dtype == torch.float32 for h in state.hidden.values())


def test_bf16_training_loss_and_gradient_stay_close_to_fp32():
    from ivln_ce.training.batching import collate
    from ivln_ce.training.trainer import batch_losses
    from tests.training.test_batching import _episode

    torch.manual_seed(0)
    p = make("cma").train()
    rng = np.random.default_rng(0)
    eps = []
    for k, T in enumerate((7, 4, 6)):
        e = _episode(list(rng.integers(0, 4, T)), list(np.linspace(0.1, 1.0, T)), k)
        e.steps["depth_features"] = rng.random((T, 128, 4, 4)).astype(np.float16)
        e.steps["rgb_features"] = rng.random((T, 2048, 4, 4)).astype(np.float16)
        eps.append(e)
    batch = collate(eps, inflection=3.2)

    def grads(precision):
        p.zero_grad(set_to_none=True)
        with autocast(precision, "cpu"):
            losses = batch_losses(p, batch, 1.0, 3, batch.valid.sum().item(), 1)
        losses["loss"].backward()
        g = torch.cat([q.grad.flatten() for q in p.parameters() if q.grad is not None])
        return losses["loss"].detach(), g

    loss32, g32 = grads("fp32")
    loss16, g16 = grads("bf16")
    assert loss16.dtype == torch.float32
    assert loss16.item() == pytest.approx(loss32.item(), rel=0.02) and loss16.item() != loss32.item()
    assert torch.nn.functional.cosine_similarity(g16, g32, dim=0).item() > 0.99


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="fp32 or bf16"):
        autocast("fp16", "cpu")
