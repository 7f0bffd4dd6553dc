"""Returns and advantages against a hand-worked stream: two episodes of one tour, the second
cut before its end (bootstrapped); no return crosses the episode end."""

import numpy as np
import pytest

from ivln_ce.rl.advantages import discounted_returns, gae, normalize

# episode A: 3 actions, ends at t = 2; episode B: 2 actions, cut (not done) after t = 4
REWARDS = [1.0, 0.0, 2.0, 0.5, 1.0]
DONES = [False, False, True, False, False]
VALUES = [1.0, 1.0, 1.0, 1.0, 1.0]
GAMMA, BOOT = 0.5, 4.0


def test_discounted_returns_by_hand():
    # A: R2 = 2, R1 = 0 + 2/2 = 1, R0 = 1 + 1/2 = 1.5 (B's rewards never reach A)
    # B: R4 = 1 + 4/2 = 3 (bootstrapped), R3 = 0.5 + 3/2 = 2
    assert discounted_returns(REWARDS, DONES, GAMMA, BOOT).tolist() == [1.5, 1.0, 2.0, 2.0, 3.0]
    # B ending at t = 4: the bootstrap value is ignored
    assert discounted_returns(REWARDS, DONES[:4] + [True], GAMMA, BOOT).tolist() == [1.5, 1.0, 2.0, 1.0, 1.0]
    # without the cut between A and B, A's returns would see B's rewards
    assert discounted_returns(REWARDS, [False] * 4 + [True], GAMMA)[2] == 2.0 + 0.5 * (0.5 + 0.5 * 1.0)


def test_gae_by_hand():
    adv1, target1 = gae(REWARDS, VALUES, DONES, GAMMA, 1.0, BOOT)
    assert adv1.tolist() == [0.5, 0.0, 1.0, 1.0, 2.0]  # lambda = 1: R_t - V_t
    assert target1.tolist() == [1.5, 1.0, 2.0, 2.0, 3.0]
    adv0, _ = gae(REWARDS, VALUES, DONES, GAMMA, 0.0, BOOT)
    assert adv0.tolist() == [0.5, -0.5, 1.0, 0.0, 2.0]  # one-step TD errors, no bootstrap across the end
    adv5, _ = gae(REWARDS, VALUES, DONES, GAMMA, 0.5, BOOT)
    # A4 = 2; A3 = 0 + 0.25 * 2; A2 = 1 (episode end); A1 = -0.5 + 0.25 * 1; A0 = 0.5 + 0.25 * A1
    assert adv5.tolist() == [0.4375, -0.25, 1.0, 0.5, 2.0]


def test_streams_are_independent_columns():
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=(7, 3)), rng.normal(size=(7, 3))
    d = rng.random((7, 3)) < 0.3
    boot = rng.normal(size=3)
    adv, tgt = gae(r, v, d, 0.9, 0.8, boot)
    ret = discounted_returns(r, d, 0.9, boot)
    for n in range(3):
        a1, t1 = gae(r[:, n], v[:, n], d[:, n], 0.9, 0.8, boot[n])
        assert adv[:, n] == pytest.approx(a1) and tgt[:, n] == pytest.approx(t1)
        assert ret[:, n] == pytest.approx(discounted_returns(r[:, n], d[:, n], 0.9, boot[n]))
    assert gae(r, v, d, 0.9, 1.0, boot)[0] == pytest.approx(ret - v)


def test_normalize_over_valid_entries():
    a = np.array([[1.0, 5.0], [3.0, 99.0]])
    valid = np.array([[True, True], [True, False]])
    out = normalize(a, valid)
    x = np.array([1.0, 5.0, 3.0])
    assert out[valid] == pytest.approx((x - 3.0) / (x.std() + 1e-8))
    assert out[1, 1] == 0.0 and out[valid].mean() == pytest.approx(0.0)
    assert normalize(a, np.zeros_like(valid)).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="same"):
        discounted_returns([1.0, 2.0], [True], 0.9)
    with pytest.raises(ValueError, match="values"):
        gae([1.0, 2.0], [1.0], [False, True], 0.9, 0.9)
