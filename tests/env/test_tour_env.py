import math

import numpy as np
from gymnasium.utils.env_checker import check_env

from ivln_ce.benchmark.synthetic import SCENE_DIR, episodes_path, references_path
from ivln_ce.config import load_config
from ivln_ce.data.episodes import load_episodes, load_reference_trajectories
from ivln_ce.data.tours import evaluation_order, load_tours
from ivln_ce.env.tour_env import TourEnv, TourItem
from ivln_ce.evaluation.agents import OracleAgent, StopAgent, run_tour
from ivln_ce.sim.base import MOVE_FORWARD, STOP
from ivln_ce.sim.embedded import EmbeddedSimulator


def make_env(out, env_overrides=(), sensors="[]", size=None):
    overrides = [f"simulator.sensors={sensors}", *env_overrides]
    if size:
        overrides += [f"simulator.{n}.{d}={size}" for n in ("rgb", "depth", "semantic") for d in ("width", "height")]
    cfg = load_config(None, overrides)
    ds = load_episodes(episodes_path(out, "val_unseen"))
    tours = load_tours(out / "tours.json", "val_unseen")
    items = [TourItem(t, eps) for t, eps in evaluation_order(ds, tours)]
    refs = load_reference_trajectories(references_path(out, "val_unseen"))
    return TourEnv(EmbeddedSimulator(cfg.simulator), items, cfg.env, refs, out / SCENE_DIR)


def test_gymnasium_env_checker(tiny_benchmark):
    env = make_env(tiny_benchmark, sensors="[rgb,depth,semantic]", size=32)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(options={"tour": 0})
    assert obs["rgb"].shape == (32, 32, 3) and obs["depth"].shape == (32, 32, 1) and obs["semantic12"].shape == (32, 32)
    assert info["tour_start"] and info["episode_start"] and info["produce_action"] and info["phase"] == "agent"


def test_agent_stops_early_then_oracle_walks_to_goal_and_next_start(tiny_benchmark):
    env = make_env(tiny_benchmark)
    obs, info = env.reset(options={"tour": 0})
    first = info["episode_id"]
    obs, _, done, _, info = env.step(STOP)  # stop at once, far from the goal
    assert info["agent_done"] and not info["sim_done"] and info["phase"] == "oracle_goal"
    assert info["metrics"]["success"] == 0.0 and info["metrics"]["steps_taken"] == 1
    assert info["episode_memory_reset"] and not info["produce_action"]
    phases = []
    while not info["sim_done"]:
        obs, _, done, _, info = env.step(STOP)  # ignored: the oracle acts
        phases.append(info["phase"])
        assert info["agent_done"] and info["episode_memory_reset"]
    assert info["finished_episode_id"] == first and info["episode_start"] and info["episode_id"] != first
    goal = np.asarray(env.tour_item.episodes[0].goal_position)
    log = info["path"]
    assert [e["phase"] for e in log][:1] == ["agent"] and {e["phase"] for e in log[1:]} == {"oracle_goal"}
    last_goal_pose = np.array(log[-1]["position"])
    assert env.sim.geodesic_distance(last_goal_pose, goal) < 0.25 + 0.25 + 1e-6  # one step from within the radius
    # then the oracle walks to the next start (unless it is already there) and hands over
    while info["phase"] != "agent":
        obs, _, done, _, info = env.step(STOP)
        assert info["phase"] in ("oracle_start", "agent")
    assert info["produce_action"]
    ep = env.episode
    assert np.allclose(env.sim.get_agent_state().position[[0, 2]], np.asarray(ep.start_position)[[0, 2]])  # precise start


def test_agent_reaching_the_goal_skips_the_goal_phase(tiny_benchmark):
    env = make_env(tiny_benchmark)
    agent = OracleAgent(env, goal_radius=0.2)
    obs, info = env.reset(options={"tour": 1})
    while True:
        obs, _, done, _, info = env.step(agent.act(obs, info))
        if info["agent_done"]:
            break
    assert info["metrics"]["success"] == 1.0
    assert info["sim_done"]  # within the oracle radius: no oracle_goal step
    assert all(e["phase"] == "agent" for e in info["path"])


def test_timeout_logs_the_final_pose_only_when_fixed(tiny_benchmark):
    for fixed in (True, False):
        env = make_env(tiny_benchmark, ["env.max_agent_steps=5", f"env.log_final_pose_on_timeout={fixed}"])
        obs, info = env.reset(options={"tour": 0})
        for k in range(5):
            obs, _, _, _, info = env.step(MOVE_FORWARD)
        assert info["agent_done"] and info["metrics"]["steps_taken"] == 5 and info["metrics"]["success"] == 0.0
        while not info["sim_done"]:
            obs, _, _, _, info = env.step(STOP)
        agent_entries = [e for e in info["path"] if e["phase"] == "agent"]
        assert len(agent_entries) == (6 if fixed else 5)


def test_oracle_failure_teleports_to_the_start(tiny_benchmark):
    env = make_env(tiny_benchmark, ["env.oracle_step_limit=0"])
    obs, info = env.reset(options={"tour": 0})
    teleported = 0
    while info["episode_start"] is False or info.get("finished_episode_id") is None:
        obs, _, done, _, info = env.step(STOP)
        teleported += info["teleported"]
        if done:
            break
    while info["phase"] != "agent":
        obs, _, done, _, info = env.step(STOP)
        teleported += info["teleported"]
    assert teleported >= 1
    ep = env.episode
    state = env.sim.get_agent_state()
    assert np.allclose(state.position[[0, 2]], np.asarray(ep.start_position)[[0, 2]]) and math.isclose(state.heading, ep.start_heading, abs_tol=1e-9)


def test_tour_signals_and_memory_reset_flags(tiny_benchmark):
    env = make_env(tiny_benchmark)
    infos = run_tour(env, StopAgent(), 0)
    assert infos[0]["tour_start"] and sum(i["tour_start"] for i in infos) == 1
    starts = [i for i in infos if i["episode_start"]]
    assert len(starts) == len(env.tour_item.episodes)
    for i in infos:
        if i["phase"] != "agent" or i["episode_start"] or i["agent_done"]:
            assert i["episode_memory_reset"]
    # a new tour starts with a tour signal and a fresh path log
    obs, info = env.reset(options={"tour": 1})
    assert info["tour_start"] and env.tour_path == []
