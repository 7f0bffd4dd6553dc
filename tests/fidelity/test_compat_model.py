import math

import pytest

torch = pytest.importorskip("torch")

from ivln_ce.fidelity.compat_model import (CompatibilityModel, CompatModelConfig, compatibility_loss,  # noqa: E402
                                           contrastive_loss, focal_loss)

S = torch.tensor([[0.5, 0.1], [0.2, 0.4]])


def lse_ce(logits, i):
    return -logits[i] + math.log(sum(math.exp(v) for v in logits))


def test_contrastive_loss_hand_computed():
    # inv_tau 2: row 0 logits (1.0, 0.2), column 0 logits (1.0, 0.4); only pair 0 is unperturbed
    row0 = math.log(1 + math.exp(-0.8))
    col0 = math.log(1 + math.exp(-0.6))
    assert float(contrastive_loss(S, torch.tensor([1, 0]), 2.0)) == pytest.approx(row0 + col0, abs=1e-6)
    row1 = lse_ce([0.4, 0.8], 1)
    col1 = lse_ce([0.2, 0.8], 1)
    both = (row0 + col0 + row1 + col1) / 2
    assert float(contrastive_loss(S, torch.tensor([1, 1]), 2.0)) == pytest.approx(both, abs=1e-6)
    assert float(contrastive_loss(S, torch.tensor([0, 0]), 2.0)) == 0.0


def test_contrastive_exclusion_removes_entries_from_both_softmaxes():
    ex = torch.tensor([[False, True], [False, False]])  # instruction 0 also describes trajectory 1
    # row 0 keeps only its diagonal -> 0; column 1 keeps only its diagonal -> 0
    expected = (0.0 + math.log(1 + math.exp(-0.6)) + lse_ce([0.4, 0.8], 1) + 0.0) / 2
    assert float(contrastive_loss(S, torch.tensor([1, 1]), 2.0, ex)) == pytest.approx(expected, abs=1e-6)
    # the diagonal is never excluded
    diag = torch.eye(2, dtype=torch.bool)
    assert float(contrastive_loss(S, torch.tensor([1, 1]), 2.0, diag)) == pytest.approx(float(contrastive_loss(S, torch.tensor([1, 1]), 2.0)))


def test_focal_loss_hand_computed():
    z = torch.tensor([0.0, 0.0, math.log(3.0), math.log(3.0)])  # p = 0.5, 0.5, 0.75, 0.75
    y = torch.tensor([1, 0, 1, 0])
    expected = [0.25 * math.log(2), 0.25 * math.log(2), 0.0625 * -math.log(0.75), 0.5625 * -math.log(0.25)]
    assert focal_loss(z, y, 2.0).tolist() == pytest.approx(expected, abs=1e-6)
    # gamma 0 is binary cross entropy
    bce = torch.nn.functional.binary_cross_entropy_with_logits(z, y.float(), reduction="none")
    assert focal_loss(z, y, 0.0).tolist() == pytest.approx(bce.tolist(), abs=1e-6)


def test_total_loss_combines_with_beta():
    a, b = torch.tensor(3.0), torch.tensor(-1.0)
    m = torch.tensor([1, 0])
    lc = float(contrastive_loss(S, m, 2.0))
    fl = focal_loss(a * torch.diagonal(S) + b, m, 2.0).mean()
    for beta in (0.0, 1.0, 2.5):
        parts = compatibility_loss(S, m, a, b, 2.0, gamma=2.0, beta=beta)
        assert float(parts.total) == pytest.approx(lc + beta * float(fl), abs=1e-6)
    # focal term by hand: z = 3 * 0.5 - 1 = 0.5 (label 1), z = 3 * 0.4 - 1 = 0.2 (label 0)
    p0, p1 = 1 / (1 + math.exp(-0.5)), 1 / (1 + math.exp(-0.2))
    hand = ((1 - p0) ** 2 * -math.log(p0) + p1 ** 2 * -math.log(1 - p1)) / 2
    assert float(fl) == pytest.approx(hand, abs=1e-6)


def test_model_shapes_lengths_and_padding_independence():
    torch.manual_seed(0)
    cfg = CompatModelConfig(vocab_size=20, feature_dim=12, views=3, embedding_size=8, hidden_size=8, projection_size=8, dropout=0.0)
    m = CompatibilityModel(cfg).eval()
    tokens = torch.tensor([[3, 4, 5, 0, 0], [6, 7, 0, 0, 0]])
    hw = m.encode_instructions(tokens)
    assert hw.shape == (2, 16)
    # padding does not change the encoding
    assert torch.allclose(m.encode_instructions(tokens[:, :3]), hw, atol=1e-6)
    views = torch.randn(2, 4, 4, 12)
    orient = torch.randn(2, 4, 4, 4)
    geo = torch.randn(2, 4, 5)
    lengths = torch.tensor([4, 2])
    hv = m.encode_trajectories(views, orient, geo, lengths)
    assert hv.shape == (2, 16)
    # a trajectory's encoding ignores viewpoints beyond its length
    views2, geo2 = views.clone(), geo.clone()
    views2[1, 2:] = 99.0
    geo2[1, 2:] = -5.0
    assert torch.allclose(m.encode_trajectories(views2, orient, geo2, lengths), hv, atol=1e-6)
    s = m.similarity(hw, hv)
    assert s.shape == (2, 2) and float(s.detach().abs().max()) <= 1.0 + 1e-6
