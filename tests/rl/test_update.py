"""The A2C / PPO update on synthetic rollouts (random features, no environment): PPO's first
step is A2C's, clipping stops the gradient, and 1 rank equals 2 gloo ranks on the same rollout."""

import os
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="reinforcement fine-tuning needs torch")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.rl.rewards import EpisodeRewards  # noqa: E402
from ivln_ce.rl.rollout import EpisodeRollout  # noqa: E402
from ivln_ce.rl.update import UpdateSettings, ValueHead, advantages, collate, losses, minibatch_groups, run_update  # noqa: E402

SMALL = ["policy.name=cma", "policy.depth_backbone=small", "policy.rgb_depth=18"]


def small_policy(seed=100):
    from ivln_ce.models.factory import build_policy

    cfg = load_config(None, SMALL)
    return build_policy(cfg.policy, 50, cfg.train, "cpu", seed=seed)[0].eval()


def synthetic_episodes(policy, n=4, seed=0):
    """Episodes with random inputs, sampled actions and their log-probs under ``policy``."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        T = int(rng.integers(2, 6))
        with torch.no_grad():
            depth = policy.net.depth_encoder.features(torch.rand(T, 48, 48, 1, generator=g))
            rgb = policy.net.rgb_encoder.features((torch.rand(T, 48, 48, 3, generator=g) * 255).to(torch.uint8))
        instruction = rng.integers(1, 50, size=int(rng.integers(3, 8)))
        actions = rng.integers(0, 4, size=T)
        steps = {"depth_features": depth.numpy(), "rgb_features": rgb.numpy(),
                 "prev_actions": np.concatenate([[-1], actions[:-1]]).astype(np.int64),
                 "agent_masks": np.array([0.0] + [1.0] * (T - 1), np.float32), "tour_masks": np.array([0.0] + [1.0] * (T - 1), np.float32),
                 "actions": actions.astype(np.int64), "logp": np.zeros(T, np.float32), "values": rng.normal(size=T).astype(np.float32)}
        e = EpisodeRollout(f"t{k}", f"e{k}", (k, 0), instruction, torch.zeros(policy.num_recurrent_layers, 512), steps,
                           rng.normal(size=T), EpisodeRewards(np.zeros(T), {}, 0.0, 0.0, 0.0))
        out.append(e)
    # the rollout's log-probs: those of the policy itself
    advs, targets = advantages(out, 0.9, 1.0, False)
    batch = collate(out, advs, targets)
    with torch.no_grad():
        logits, *_ = policy.forward_sequence_features(batch.observations, batch.prev_actions, batch.agent_masks, batch.tour_masks, batch.h0)
        logp = torch.log_softmax(logits, -1).gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)
    for n_, e in enumerate(out):
        e.steps["logp"] = logp[: e.length, n_].numpy().copy()
    return out


def grads(policy, value, loss):
    policy.zero_grad()
    value.zero_grad()
    loss.backward()
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in [*policy.parameters(), *value.parameters()]]


def test_ppo_first_step_gradient_is_the_a2c_gradient_and_clipping_stops_it():
    policy, value = small_policy(), ValueHead()
    eps = synthetic_episodes(policy)
    advs, targets = advantages(eps, 0.9, 0.95, True)
    batch = collate(eps, advs, targets)
    total = int(batch.valid.sum())
    a2c = losses(policy, value, batch, "a2c", 0.2, 0.5, 0.01, total)
    ppo = losses(policy, value, batch, "ppo", 0.2, 0.5, 0.01, total)
    assert float(a2c["approx_kl"]) == pytest.approx(0.0, abs=1e-6) and float(ppo["clip_fraction"]) == 0.0
    # the same objective value up to the constant -mean(A): log pi vs pi / pi_old = 1
    assert float(ppo["policy_loss"]) == pytest.approx(-float((batch.advantages * batch.valid).sum()) / total, abs=1e-5)
    for ga, gp in zip(grads(policy, value, a2c["loss"]), grads(policy, value, ppo["loss"])):
        assert torch.allclose(ga, gp, atol=1e-6)
    # old log-probs far below the current ones: every ratio is above 1 + eps, so steps with a
    # positive advantage are clipped (no policy gradient) and the others are not
    batch.old_logp = batch.old_logp - 1.0
    only_value = losses(policy, value, batch, "ppo", 0.2, 0.0, 0.0, total)
    assert float(only_value["clip_fraction"]) == pytest.approx(1.0)
    positive = batch.valid & (batch.advantages > 0)
    batch.advantages = torch.where(positive, batch.advantages, torch.zeros_like(batch.advantages))
    clipped = losses(policy, value, batch, "ppo", 0.2, 0.0, 0.0, total)
    assert all(float(g.abs().max()) == 0.0 for g in grads(policy, value, clipped["loss"]))


def test_value_loss_and_entropy_by_hand():
    policy, value = small_policy(), ValueHead()
    eps = synthetic_episodes(policy, n=2)
    advs, targets = advantages(eps, 0.9, 1.0, False)
    batch = collate(eps, advs, targets)
    total = int(batch.valid.sum())
    out = losses(policy, value, batch, "a2c", 0.2, 0.5, 0.01, total)
    # the rollout's values are the value targets minus the advantages (lambda = 1: A = R - V_old)
    with torch.no_grad():
        logits, _, _, feats = policy.forward_sequence_features(batch.observations, batch.prev_actions, batch.agent_masks,
                                                               batch.tour_masks, batch.h0)
        v = value(feats)
        p = torch.softmax(logits, -1)
    m = batch.valid
    assert float(out["value_loss"]) == pytest.approx(float(((v - batch.targets)[m] ** 2).mean()), rel=1e-5)
    assert float(out["entropy"]) == pytest.approx(float((-(p * p.log()).sum(-1))[m].mean()), rel=1e-5)
    assert float(out["loss"].detach()) == pytest.approx(float(out["policy_loss"]) + 0.5 * float(out["value_loss"]) - 0.01 * float(out["entropy"]),
                                               rel=1e-5)


def test_minibatches_are_even_seeded_parts_of_the_planned_episodes():
    keys = [(f"t{k // 2}", f"e{k}") for k in range(7)]
    a = minibatch_groups(keys, 1, 2, 0, 3)
    assert set(a) == set(keys) and sorted(np.bincount(list(a.values())).tolist()) == [2, 2, 3]
    assert a == minibatch_groups(keys, 1, 2, 0, 3)  # a function of (seed, update, epoch) and the plan
    assert a != minibatch_groups(keys, 1, 2, 1, 3)  # reshuffled every pass
    assert set(minibatch_groups(keys, 1, 2, 0, 1).values()) == {0}
    assert sorted(minibatch_groups(keys[:2], 1, 2, 0, 3).values()) == [0, 1]  # more minibatches than episodes: one stays empty
    policy = small_policy()
    eps = synthetic_episodes(policy, n=2)
    with pytest.raises(ValueError, match="not among the rollout's planned episodes"):
        run_update(policy, ValueHead(), torch.optim.Adam(policy.parameters()), list(policy.parameters()), eps, UpdateSettings(), 0, 0,
                   keys=[("t0", "e0")])


SETTINGS = {a: UpdateSettings(algorithm=a, ppo_epochs=2, minibatches=2, gamma=0.9, gae_lambda=0.95) for a in ("a2c", "ppo")}


def _ddp_worker(rank, world, port, path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        out = {}
        for algorithm, settings in SETTINGS.items():
            policy = small_policy()
            torch.manual_seed(0)
            value = ValueHead()
            eps = synthetic_episodes(policy, n=5)
            mine = eps if world == 1 else [e for i, e in enumerate(eps) if i % world == rank]  # rank 1 gets 2 of 5
            params = [p for p in policy.parameters() if p.requires_grad] + list(value.parameters())
            opt = torch.optim.SGD(params, lr=0.05)  # Adam's first steps turn round-off in near-zero gradients into +-lr
            keys = [(e.tour_id, e.episode_id) for e in eps]
            steps = run_update(policy, value, opt, params, mine, settings, 5, 0, keys=keys)
            out[algorithm] = {"policy": policy.state_dict(), "value": value.state_dict(), "steps": steps}
        if rank == 0:
            torch.save(out, path)
    finally:
        torch.distributed.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_one_rank_and_two_gloo_ranks_take_the_same_steps(tmp_path):
    """The same five episodes, all on one rank or split 3 + 2 over two gloo ranks: the same
    A2C and PPO steps (two minibatches, PPO two passes), up to float round-off."""
    results = []
    for world in (1, 2):
        path = tmp_path / f"w{world}.pt"
        torch.multiprocessing.start_processes(_ddp_worker, args=(world, _free_port(), str(path)), nprocs=world, start_method="spawn")
        results.append(torch.load(path, weights_only=False))
    initial = small_policy().state_dict()
    for algorithm in SETTINGS:
        one, two = results[0][algorithm], results[1][algorithm]
        assert len(one["steps"]) == len(two["steps"]) == (4 if algorithm == "ppo" else 2)
        for a, b in zip(one["steps"], two["steps"]):
            assert a == pytest.approx(b, rel=1e-4, abs=1e-6)
        moved = 0
        for k, v in one["policy"].items():
            assert torch.allclose(v, two["policy"][k], atol=1e-6), (algorithm, k, float((v - two["policy"][k]).abs().max()))
            moved += int(not torch.equal(v, initial[k]))
        assert moved > 5
        for k, v in one["value"].items():
            assert torch.allclose(v, two["value"][k], atol=1e-6), (algorithm, k)
