"""Rollouts on the engine: what the update replays is what was sampled (episodic CMA, and
TourCMA over tours with oracle walks, whose memory carries across episodes), the rewards are
those of the agent-done info, and a rollout does not depend on the number of environments."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="reinforcement fine-tuning needs torch")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.rl.rewards import EpisodeOutcome, episode_rewards  # noqa: E402
from ivln_ce.rl.rollout import RLDriver, reference_points  # noqa: E402
from ivln_ce.rl.trainer import _engine, build_value_head, reward_spec  # noqa: E402
from ivln_ce.rl.update import advantages, collate  # noqa: E402
from ivln_ce.training.trainer import _pipeline, load_training_data  # noqa: E402

SMALL = ["policy.depth_backbone=small", "policy.rgb_depth=18", "simulator.renderer=auto", "simulator.sensors=[rgb,depth]",
         *[f"simulator.{s}.{d}=48" for s in ("rgb", "depth", "semantic") for d in ("width", "height")]]


def rl_config(data, out, *extra):
    return load_config(None, [f"data.root={data}", f"train.out_dir={out}", "policy.name=cma", *SMALL, "train.trainer=rl",
                              "train.rl.allow_random_init=true", "env.max_agent_steps=12", *extra])


def run_rollout(cfg, plan, num_envs=2, update=0, episodes_per_tour=None):
    from ivln_ce.data.tours import Tour
    from ivln_ce.env.tour_env import TourItem
    from ivln_ce.models.factory import build_policy

    data = load_training_data(cfg)
    if episodes_per_tour:  # the first episodes of each tour: shorter tours, fewer oracle walks
        data.items = [TourItem(Tour(it.tour.tour_id, it.tour.scan, it.tour.episode_ids[:episodes_per_tour]), it.episodes[:episodes_per_tour])
                      for it in data.items]
    policy, _ = build_policy(cfg.policy, data.vocab_size, cfg.train, "cpu", seed=int(cfg.seed))
    value = build_value_head(int(cfg.seed), "cpu")
    episodes = {str(e.episode_id): e for it in data.items for e in it.episodes}
    driver = RLDriver(policy.eval(), value, _pipeline(cfg, policy, "cpu"), reward_spec(cfg), episodes, data.references,
                      int(cfg.seed), update, {data.items[k].tour.tour_id: n for n, k in enumerate(plan)})
    infos = {}

    def final(view):
        if "metrics" in view.info:
            infos[view.info["metrics_episode_id"]] = view.info
        driver.final(view)

    real_finish = driver._finish

    def finish(view):
        infos[view.info["metrics_episode_id"]] = view.info
        real_finish(view)

    driver._finish = finish
    engine = _engine(load_config(None, [*_overrides(cfg), f"train.num_envs={num_envs}"]), data, policy, len(plan))
    with engine:
        engine.run(plan, driver.decide, on_stream_end=driver.drop, on_final_view=final)
    return policy, value, data, driver.sorted_episodes(), infos


def _overrides(cfg):
    from ivln_ce.config import resolved
    from ivln_ce.training.trainer import _overrides as flat

    return flat(resolved(cfg))


def replayed_logp(policy, value, episodes):
    advs, targets = advantages(episodes, 0.99, 1.0, False)
    batch = collate(episodes, advs, targets)
    with torch.no_grad():
        logits, _, _, feats = policy.forward_sequence_features(batch.observations, batch.prev_actions, batch.agent_masks,
                                                               batch.tour_masks, batch.h0)
        logp = torch.log_softmax(logits.float(), -1).gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)
        v = value(feats)
    out = []
    for n, e in enumerate(episodes):
        out.append((logp[: e.length, n].numpy(), v[: e.length, n].numpy()))
    return out


def _check_replay(policy, value, episodes):
    assert episodes
    for e, (logp, v) in zip(episodes, replayed_logp(policy, value, episodes)):
        assert np.allclose(logp, e.steps["logp"], atol=1e-5), (e.episode_id, logp, e.steps["logp"])
        assert np.allclose(v, e.steps["values"], atol=1e-5)
        assert e.steps["agent_masks"][0] == 0.0 and np.all(e.steps["agent_masks"][1:] == 1.0)
        assert e.steps["prev_actions"][1:].tolist() == e.steps["actions"][:-1].tolist()


def test_episodic_rollout_replays_to_the_sampled_log_probs_and_rewards(tiny_benchmark, tmp_path):
    cfg = rl_config(tiny_benchmark, tmp_path / "x", "env.oracle_phases=false")
    policy, value, data, episodes, infos = run_rollout(cfg, [0, 1, 2])
    assert [e.order for e in episodes] == [(0, 0), (1, 0), (2, 0)]
    assert [e.tour_id for e in episodes] == [data.items[k].tour.tour_id for k in (0, 1, 2)]
    _check_replay(policy, value, episodes)
    for e in episodes:
        info = infos[e.episode_id]
        ep = next(x for it in data.items for x in it.episodes if str(x.episode_id) == e.episode_id)
        outcome = EpisodeOutcome(np.asarray(info["agent_path"]), np.asarray(info["goal_distances"]),
                                 reference_points(ep, data.references), stopped=int(e.steps["actions"][-1]) == 0)
        want = episode_rewards(outcome, reward_spec(cfg))
        assert e.rewards.tolist() == want.rewards.tolist()
        assert e.length == info["metrics"]["steps_taken"]
        # the rewarded fidelity is the evaluation's: CLS and nDTW as the environment reports them
        assert e.outcome.cls == pytest.approx(info["metrics"]["cls"], abs=1e-12)
        assert e.outcome.ndtw == pytest.approx(info["metrics"]["ndtw"], abs=1e-12)
        assert e.outcome.success == info["metrics"]["success"]


def _tour_memory_replay(tiny_benchmark, tmp_path, *extra, episodes_per_tour=None):
    cfg = rl_config(tiny_benchmark, tmp_path / "x", "policy.name=tour_cma", "train.use_tours=true", "env.max_agent_steps=6", *extra)
    policy, value, data, episodes, _ = run_rollout(cfg, [0], episodes_per_tour=episodes_per_tour)
    assert len(episodes) == len(data.items[0].episodes) >= 2
    assert [e.order for e in episodes] == [(0, i) for i in range(len(episodes))]
    assert episodes[0].steps["tour_masks"][0] == 0.0 and all(e.steps["tour_masks"][0] == 1.0 for e in episodes[1:])
    assert float(episodes[1].h0.abs().sum()) > 0  # the state the earlier episodes (and oracle walks) left
    _check_replay(policy, value, episodes)
    zeroed = episodes[1:]
    for e in zeroed:
        e.h0 = torch.zeros_like(e.h0)
    logp = replayed_logp(policy, value, zeroed)
    assert not all(np.allclose(lp, e.steps["logp"], atol=1e-5) for e, (lp, _) in zip(zeroed, logp))


def test_tour_memory_is_replayed_from_each_episode_start(tiny_benchmark, tmp_path):
    """TourCMA over a tour: its GRUs carry over from earlier episodes, so the replay must
    start from the stored state (a zero state differs). Teleports between episodes (fast)."""
    _tour_memory_replay(tiny_benchmark, tmp_path, "env.oracle_phases=false")


@pytest.mark.slow
def test_tour_memory_is_replayed_after_oracle_walks(tiny_benchmark, tmp_path):
    """As above with the evaluation's oracle walks, which the tour memory integrates (the first
    two episodes of a tour: one oracle walk between them)."""
    _tour_memory_replay(tiny_benchmark, tmp_path, *[f"simulator.{s}.{d}=32" for s in ("rgb", "depth", "semantic") for d in ("width", "height")],
                        episodes_per_tour=2)


@pytest.mark.slow
def test_a_rollout_does_not_depend_on_the_number_of_environments(tiny_benchmark, tmp_path):
    cfg = rl_config(tiny_benchmark, tmp_path / "x", "env.oracle_phases=false")
    runs = [run_rollout(cfg, [3, 0, 2, 1], num_envs=k)[3] for k in (1, 3)]
    assert [e.episode_id for e in runs[0]] == [e.episode_id for e in runs[1]]
    for a, b in zip(*runs):
        assert a.steps["actions"].tolist() == b.steps["actions"].tolist() and a.rewards.tolist() == b.rewards.tolist()
