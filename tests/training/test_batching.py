"""Pure pieces of training: beta schedule, batch orders, lanes, collate, loss by hand."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from ivln_ce.training.batching import PAD_VALUE, bucketed_batches, collate, official_batches  # noqa: E402
from ivln_ce.training.collect import beta_for_round, plan_round  # noqa: E402
from ivln_ce.training.store import Episode  # noqa: E402
from ivln_ce.training.tour_sequential import lane_batches, pack_lanes  # noqa: E402


def test_beta_schedule():
    assert [beta_for_round(1.0, k, False) for k in range(3)] == [1.0, 1.0, 1.0]  # teacher forcing
    assert [beta_for_round(0.5, k, False) for k in range(4)] == [1.0, 0.5, 0.25, 0.125]
    # warm-started (official T6): the exponent is k + 1, so fine-tuning starts at p
    assert [beta_for_round(0.5, k, True) for k in range(10)] == [0.5 ** (k + 1) for k in range(10)]


def test_official_batches_follow_the_three_share_loader():
    n, b = 1234, 5
    batches = official_batches(n, b, seed=0, round_=0, epoch=0)
    assert all(len(x) == b for x in batches)
    seen = [i for x in batches for i in x]
    assert len(seen) == len(set(seen))
    share = math.ceil(n / 3)
    for w in range(3):  # each share drops only its own incomplete last batch
        size = min((w + 1) * share, n) - w * share
        assert sum(1 for i in seen if w * share <= i < (w + 1) * share) == size - size % b
    # batches interleave the shares: consecutive batches come from different shares
    shares = [x[0] // share for x in batches[:6]]
    assert shares == [0, 1, 2, 0, 1, 2]
    # a buffer is a random permutation: lengths are not sorted (T12), and epochs differ
    assert official_batches(n, b, 0, 0, 1) != batches and official_batches(n, b, 0, 0, 0) == batches


def test_bucketed_batches_sort_by_length_within_buffers_and_drop_nothing():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 200, 1003).tolist()
    batches = bucketed_batches(lengths, 4, seed=1, round_=0, epoch=0)
    assert sorted(i for x in batches for i in x) == list(range(1003))
    spread = np.mean([max(lengths[i] for i in x) - min(lengths[i] for i in x) for x in batches if len(x) == 4])
    rand = np.mean([np.ptp(rng.choice(lengths, 4)) for _ in range(300)])
    assert spread < rand / 10  # bucketing: far less padding than random batches


def test_plan_round_takes_whole_items_until_the_update_size():
    from ivln_ce.data.tours import Tour
    from ivln_ce.env.tour_env import TourItem

    items = [TourItem(Tour(str(k), "s", tuple(str(10 * k + j) for j in range(k + 1))), [None] * (k + 1)) for k in range(6)]
    plan = plan_round(items, 7, seed=3, round_=0)
    covered = sum(len(items[i].episodes) for i in plan)
    assert covered >= 7 and covered - len(items[plan[-1]].episodes) < 7
    assert plan == plan_round(items, 7, seed=3, round_=0) != plan_round(items, 7, seed=3, round_=1)
    assert sorted(plan_round(items, 0, seed=3, round_=0)) == list(range(6))


def test_lanes_official_and_fixed():
    # hand-made tour set: sizes 5, 3, 4, 1, 2 (map order), 2 lanes
    tours = {"a": [0, 1, 2, 3, 4], "b": [5, 6, 7], "c": [8, 9, 10, 11], "d": [12], "e": [13, 14]}
    # decreasing size a5, c4, b3, e2, d1; each to the lane with the smallest total (lowest on ties):
    # a -> 0 (5, 0); c -> 1 (5, 4); b -> 1 (5, 7); e -> 0 (7, 7); d -> 0 (8, 7)
    assert pack_lanes([5, 3, 4, 1, 2], 2, [0, 2, 1, 4, 3]) == [[0, 4, 3], [2, 1]]
    off = lane_batches(tours, 2, seed=0, round_=0, epoch=0, official=True, shuffle_within=False)
    # lanes [a, e, d] (8 episodes) and [c, b] (7): batches 0 .. 7 - 2, the last full batch dropped too
    assert len(off) == 6
    assert [x[0][0] for x in off] == [0, 1, 2, 3, 4, 13] and [x[1][0] for x in off] == [8, 9, 10, 11, 5, 6]
    assert [x[0][1] for x in off] == [True, False, False, False, False, True]  # tour e starts at batch 5
    assert [x[1][1] for x in off] == [True, False, False, False, True, False]
    assert off == lane_batches(tours, 2, 0, 0, 1, True, False)  # the same lanes every epoch
    fixed = lane_batches(tours, 2, seed=0, round_=0, epoch=0, official=False, shuffle_within=True)
    used = sorted(e[0] for x in fixed for e in x if e is not None)
    assert used == list(range(15))  # every episode, no drop
    for lane in range(2):  # within a lane, tours stay contiguous and each starts with its flag
        seq = [x[lane] for x in fixed if x[lane] is not None]
        owner = {i: t for t, ids in tours.items() for i in ids}
        starts = [k for k, (i, first) in enumerate(seq) if first]
        assert starts[0] == 0 and all(owner[seq[k][0]] != owner[seq[k - 1][0]] for k in starts[1:])
    assert lane_batches(tours, 2, 0, 0, 0, False, True) != lane_batches(tours, 2, 0, 0, 1, False, True)


def _episode(actions, progress, k=0):
    T = len(actions)
    return Episode({"episode_id": str(k), "steps": T}, {"instruction": np.arange(1, 6)},
                   {"depth_features": np.full((T, 128, 4, 4), k, np.float16), "oracle_actions": np.array(actions),
                    "prev_actions": np.array([-1] + list(actions[:-1])), "progress": np.array(progress, np.float32).reshape(T, 1)})


def test_collate_pads_with_one_and_weights_inflections():
    b = collate([_episode([1, 1, 2, 2, 0], [0.1, 0.2, 0.3, 0.4, 0.5]), _episode([3, 0], [0.5, 0.9], 1)], inflection=3.2)
    assert b.observations["depth_features"].shape == (5, 2, 128, 4, 4)
    assert float(b.observations["depth_features"][4, 1, 0, 0, 0]) == PAD_VALUE
    assert b.progress[:, 1].tolist() == pytest.approx([0.5, 0.9, 1.0, 1.0, 1.0])
    assert b.masks[:, 0].tolist() == [0, 1, 1, 1, 1]
    # weights: c at t = 0 and where the expert label changes, 1 elsewhere, 0 on padding
    assert b.weights[:, 0].tolist() == pytest.approx([3.2, 1, 3.2, 1, 3.2])
    assert b.weights[:, 1].tolist() == pytest.approx([3.2, 3.2, 0, 0, 0])
    assert b.prev_actions[:, 0].tolist() == [-1, 1, 1, 2, 2]
    assert b.prev_actions[:, 1].tolist() == [-1, 3, 0, 0, 0]  # padded with 0, as officially (SPEC §9.3)
    assert b.expert[:, 1].tolist() == [3, 0, 0, 0, 0]


def test_loss_equals_a_hand_computation():
    from ivln_ce.training.trainer import batch_losses

    batch = collate([_episode([1, 2, 2], [0.1, 0.2, 0.3]), _episode([0], [0.7], 1)], inflection=2.0)
    logits = torch.tensor([[[2.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]],
                           [[0.0, 0.0, 1.0, 0.0], [5.0, 0.0, 0.0, 0.0]],
                           [[0.0, 0.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0]]])
    pred = torch.tensor([[0.0, 0.5], [0.3, 0.0], [0.3, 0.0]])

    class Stub:
        pm_broadcast_bug = False

        def forward_sequence(self, obs, prev, am, tm):
            return logits, pred, None

    out = batch_losses(Stub(), batch, progress_weight=1.0, global_episodes=2, global_valid=4, world=1)

    def ce(row, a):
        return -math.log(math.exp(row[a]) / sum(math.exp(v) for v in row))

    ep0 = (2.0 * ce([2, 1, 0, 0], 1) + 2.0 * ce([0, 0, 1, 0], 2) + 1.0 * ce([0, 0, 2, 0], 2)) / 5.0
    ep1 = ce([0, 0, 0, 3], 0)
    assert float(out["action_loss"]) == pytest.approx((ep0 + ep1) / 2)
    pm = ((0.0 - 0.1) ** 2 + (0.3 - 0.2) ** 2 + (0.3 - 0.3) ** 2 + (0.5 - 0.7) ** 2) / 4
    assert float(out["progress_loss"]) == pytest.approx(pm)
    assert float(out["loss"]) == pytest.approx((ep0 + ep1) / 2 + pm)
    assert float(out["correct"]) == 2 and float(out["valid"]) == 4  # argmax [0, 2, 2] vs [1, 2, 2]; [3] vs [0]


def test_the_official_fp16_store_option_rounds_token_ids_above_2048():
    from ivln_ce.training.collect import fp16_tokens

    ids = np.array([0, 5, 2047, 2048, 2049, 2051, 2503])
    assert fp16_tokens(ids).tolist() == [0, 5, 2047, 2048, 2048, 2052, 2504]


def test_rank_shares_of_a_global_batch_cover_every_episode_once():
    from ivln_ce.training.trainer import _slice

    for size in range(2, 12):
        batch = list(range(100, 100 + size))
        for world in (1, 2, 3, 4):
            if size < world:
                continue
            shares = [_slice(batch, r, world) for r in range(world)]
            assert [i for s in shares for i in s] == batch  # contiguous, in order, none dropped or repeated
            assert max(map(len, shares)) - min(map(len, shares)) <= 1 and min(map(len, shares)) >= 1
