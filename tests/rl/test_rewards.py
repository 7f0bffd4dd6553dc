"""The rewards of ``ivln_ce.rl.rewards`` on hand-built paths, against hand-computed values."""

import math

import numpy as np
import pytest

from ivln_ce.metrics.episode import cls
from ivln_ce.rl.rewards import (EpisodeOutcome, RewardError, RewardSpec, cls_shaping, episode_rewards, fidelity_reward,
                                goal_reward, ndtw_reward, parse_reward, prefix_cls)

# an L-shaped reference of length 3, followed exactly, then STOP: T = 4 actions
R = np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0], [2, 0, 1]], float)
FOLLOW = EpisodeOutcome(path=np.vstack([R, R[-1:]]), goal_distances=[3.0, 2.0, 1.0, 0.0, 0.0], reference=R, stopped=True)
# a straight reference of length 3; the agent walks 4 m the other way and times out (T = 1)
R2 = np.array([[0, 0, 0], [3, 0, 0]], float)
ASTRAY = EpisodeOutcome(path=[[0, 0, 0], [0, 0, 4]], goal_distances=[3.0, 6.0], reference=R2, stopped=False)
SEED = RewardSpec()  # success 1, failure 0, d_th 3


def test_goal_reward_is_eq_11_on_a_followed_path():
    # progress 1, 1, 1 m, then STOP (no move) with the success term 1 at the last action
    assert goal_reward(FOLLOW, SEED).tolist() == [1.0, 1.0, 1.0, 1.0]


def test_fidelity_and_ndtw_rewards_on_a_followed_path():
    # CLS(R, R) = 1 (PC = 1, EPL = PL = 3), nDTW = 1 (DTW 0): 0 until the end, then 1 + 1
    assert fidelity_reward(FOLLOW, SEED).tolist() == [0.0, 0.0, 0.0, 2.0]
    assert ndtw_reward(FOLLOW, SEED).tolist() == [0.0, 0.0, 0.0, 2.0]


def test_rewards_of_a_path_that_goes_astray_by_hand():
    spec = RewardSpec(success_reward=1.0, failure_reward=-0.5)
    # no STOP: the failure term; the agent moved 3 m away from the goal (3 -> 6)
    assert goal_reward(ASTRAY, spec).tolist() == [3.0 - 6.0 - 0.5]
    # PC = (e^0 + e^(-3/3)) / 2; EPL = 3 PC; PL = 4 > EPL, so LS = EPL / (EPL + 4 - EPL) = EPL / 4
    pc = (1.0 + math.exp(-1.0)) / 2
    hand_cls = pc * (3 * pc / 4)
    assert hand_cls == pytest.approx(0.350830, abs=1e-6)
    assert fidelity_reward(ASTRAY, spec)[0] == pytest.approx(-0.5 + hand_cls, abs=1e-12)
    # DTW: costs |x1-y1| = 0, |x2-y2| = 5 on the diagonal -> 5; nDTW = exp(-5 / (2 * 3))
    assert ndtw_reward(ASTRAY, spec)[0] == pytest.approx(-0.5 + math.exp(-5.0 / 6.0), abs=1e-12)


def test_success_needs_stop_and_a_strictly_smaller_distance():
    base = dict(path=[[0, 0, 0], [0, 0, 0]], reference=R2)
    stop_at = lambda d, stopped: goal_reward(EpisodeOutcome(goal_distances=[d, d], stopped=stopped, **base), SEED)[-1]  # noqa: E731
    assert stop_at(2.999, True) == 1.0
    assert stop_at(3.0, True) == 0.0  # the benchmark's strict "<"
    assert stop_at(0.0, False) == 0.0  # a timeout never succeeds
    assert goal_reward(EpisodeOutcome(goal_distances=[1.0, 1.0], stopped=True, **base), RewardSpec(d_th=0.5))[-1] == 0.0


def test_weighted_sum_and_its_terms():
    spec = RewardSpec(weights=parse_reward("goal:0.5, fidelity:2"))
    out = episode_rewards(FOLLOW, spec)
    assert out.rewards.tolist() == pytest.approx([0.5, 0.5, 0.5, 0.5 + 4.0])
    assert out.terms == pytest.approx({"goal": 4.0, "fidelity": 2.0, "ndtw": 2.0})  # every reward reported, weighted or not
    assert (out.success, out.cls, out.ndtw) == (1.0, pytest.approx(1.0), pytest.approx(1.0))
    astray = episode_rewards(ASTRAY, RewardSpec(weights={"ndtw": 1.0}))
    assert astray.success == 0.0 and astray.ndtw == pytest.approx(math.exp(-5 / 6))
    assert astray.rewards.tolist() == pytest.approx([math.exp(-5 / 6)])


def test_cls_of_every_prefix_equals_the_metric_and_the_shaping_telescopes():
    rng = np.random.default_rng(3)
    for _ in range(5):
        path = np.cumsum(rng.normal(size=(9, 3)) * [1, 0, 1], axis=0)
        ref = np.cumsum(rng.normal(size=(6, 3)) * [1, 0, 1], axis=0)
        got = prefix_cls(path, ref)
        want = [cls(path[: t + 1], ref).cls for t in range(len(path))]
        assert got == pytest.approx(want, abs=1e-12)
    # the followed path, by hand at t = 0: nearest distances 0, 1, 2, sqrt(5); PL = 0 so LS = 1/2
    pc0 = np.mean(np.exp(-np.array([0.0, 1.0, 2.0, math.sqrt(5.0)]) / 3.0))
    shaping = cls_shaping(FOLLOW)
    assert prefix_cls(FOLLOW.path, R)[0] == pytest.approx(pc0 / 2)
    assert shaping.sum() == pytest.approx(1.0 - pc0 / 2)
    assert shaping[-1] == pytest.approx(0.0)  # STOP adds no point: CLS unchanged
    shaped = episode_rewards(FOLLOW, RewardSpec(weights={"fidelity": 1.0}, cls_shaping=0.5))
    assert shaped.rewards == pytest.approx(fidelity_reward(FOLLOW, SEED) + 0.5 * shaping)
    assert shaped.terms["cls_shaping"] == pytest.approx(1.0 - pc0 / 2)
    assert "cls_shaping" not in episode_rewards(FOLLOW, SEED).terms  # off by default


@pytest.mark.parametrize("bad", ["", "cls", "goal,goal", "goal:x", "goal:inf", "goal;fidelity", "Goal"])
def test_bad_reward_specifications_are_refused(bad):
    with pytest.raises(RewardError):
        parse_reward(bad)


def test_parse_reward_weights():
    assert parse_reward("goal") == {"goal": 1.0}
    assert parse_reward("fidelity:1,ndtw:0.25") == {"fidelity": 1.0, "ndtw": 0.25}
    assert parse_reward(" goal : -1e-1 ") == {"goal": -0.1}


def test_malformed_episodes_are_refused():
    with pytest.raises(RewardError, match="at least one action"):
        EpisodeOutcome(path=[[0, 0, 0]], goal_distances=[1.0], reference=R, stopped=True)
    with pytest.raises(RewardError, match="goal distances"):
        EpisodeOutcome(path=[[0, 0, 0], [1, 0, 0]], goal_distances=[1.0], reference=R, stopped=True)
    with pytest.raises(RewardError, match="not finite"):
        goal_reward(EpisodeOutcome(path=[[0, 0, 0], [1, 0, 0]], goal_distances=[1.0, math.inf], reference=R, stopped=False), SEED)
