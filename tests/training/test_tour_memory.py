"""Tour-sequential training never hands one stream's memory to another: a recording stub
policy sees, for every lane of every batch, the state carried from that lane's previous
episode, and that state is kept (tour mask 1) only when the episode continues the same tour."""

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.training.store import Episode, TrajectoryStore, TrajectoryWriter  # noqa: E402
from ivln_ce.training.tour_sequential import train_tour_epoch  # noqa: E402
from ivln_ce.training.trainer import RunState, canonical_order  # noqa: E402

TOUR_SIZES = {"t0": 4, "t1": 1, "t2": 3, "t3": 2, "t4": 5, "t5": 2, "t6": 3}


class RecordingPolicy(torch.nn.Module):
    """Returns, as each episode's final state, its own tag (its id), and records what it got."""

    num_recurrent_layers = 1

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(4))
        self.net = SimpleNamespace(state_encoder=SimpleNamespace(rnn=SimpleNamespace(hidden_size=2)))
        self.calls = []

    def forward_sequence(self, obs, prev_actions, masks, tour_masks, h0, lengths=None):
        T, B = masks.shape
        tags = obs["depth_features"][0, :, 0].clone()
        self.calls.append({"tags": tags.tolist(), "h0": h0[:, 0, 0].tolist(), "tour_mask": tour_masks[0].tolist(),
                           "agent_mask": masks[0].tolist()})
        logits = self.w.expand(T, B, 4) * 1.0
        progress = self.w.sum() * torch.zeros(T, B)
        return logits, progress, tags[:, None, None].expand(B, 1, 2).clone()


def _store(folder):
    with TrajectoryWriter(folder, "rank0", fp16=False) as w:
        tag = 0
        for plan, (tour, n) in enumerate(TOUR_SIZES.items()):
            for pos in range(n):
                tag += 1
                T = 2 + pos % 3
                w.append(Episode({"episode_id": str(tag), "tour_id": tour, "position": pos, "steps": T, "round": 0,
                                  "order": [0, plan, pos]},
                                 {"instruction": np.array([1, 2, 3])},
                                 {"depth_features": np.full((T, 1), float(tag), np.float32),
                                  "oracle_actions": np.ones(T, np.int64), "prev_actions": np.zeros(T, np.int64),
                                  "progress": np.zeros((T, 1), np.float32)}))
    return TrajectoryStore(folder)


@pytest.mark.parametrize("official", [True, False])
def test_lanes_carry_memory_only_within_a_tour(tmp_path, official):
    store = _store(tmp_path / "store")
    order = canonical_order(store)
    tour_of = {store.meta(i)["episode_id"]: store.meta(i)["tour_id"] for i in order}
    position = {store.meta(i)["episode_id"]: store.meta(i)["position"] for i in order}
    cfg = load_config(None, ["train.trainer=tour_sequential", "train.batch_size=3", f"train.official_lanes={str(official).lower()}",
                             "train.shuffle_within_tour=false", "train.progress_weight=0", "train.epochs=1"])
    policy = RecordingPolicy()
    params = list(policy.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    train_tour_epoch(cfg, policy, opt, params, store, order, RunState(), 0, 0, None, 0, 1, False, lambda: None)
    assert policy.calls
    seen = []
    for call in policy.calls:
        assert call["agent_mask"] == [0.0] * len(call["tags"])  # every episode starts its episodic memory afresh
        for tag, h0, tour_mask in zip(call["tags"], call["h0"], call["tour_mask"]):
            ep = str(int(tag))
            seen.append(ep)
            if tour_mask == 0.0:
                assert position[ep] == 0  # only a tour's first episode resets the tour memory
            else:
                prev = str(int(h0))  # the state came from the episode this lane ran before
                assert tour_of[prev] == tour_of[ep] and position[prev] == position[ep] - 1
    assert len(seen) == len(set(seen))  # no episode twice in an epoch
    if not official:
        assert sorted(seen, key=int) == [str(i) for i in range(1, sum(TOUR_SIZES.values()) + 1)]  # every episode used
