import math

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ivln_ce.benchmark.synthetic import SCENE_DIR, episodes_path, references_path
from ivln_ce.config import load_config
from ivln_ce.data.episodes import load_episodes, load_reference_trajectories
from ivln_ce.data.tours import evaluation_order, load_tours
from ivln_ce.env.tour_env import TourEnv, TourItem
from ivln_ce.rollout.scripted import OracleAgent, StopAgent, run_tour
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


def test_start_phase_uses_its_own_radius(tiny_benchmark):
    """With a 0.6 m goal radius the oracle still walks to within 0.25 m of each next start (SPEC §3.3)."""
    env = make_env(tiny_benchmark, ["env.oracle_goal_radius=0.6", "env.precise_episode_start=false"])
    for tour in range(len(env.tours)):
        obs, info = env.reset(options={"tour": tour})
        done = False
        while not done:
            obs, _, done, _, info = env.step(STOP)
            if info["produce_action"] and not done:  # handed over at the start of an episode
                ep = env.episode
                d = env.sim.geodesic_distance(env.sim.get_agent_state().position, ep.start_position)
                assert d < 0.25 + 1e-9, (tour, ep.episode_id, d)


def test_reset_teleport_is_flagged_and_counted(tiny_benchmark):
    """A failed safe query at the reset into oracle_start teleports: info says so on that step."""
    env = make_env(tiny_benchmark, ["env.oracle_step_limit=0"])
    infos = run_tour(env, StopAgent(), 0)
    starts = [i for i in infos if i["episode_start"] and not i["tour_start"]]
    assert starts and all(i["teleported"] for i in starts if i["phase"] == "agent" and i["produce_action"])
    flagged = sum(i["teleported"] for i in infos)
    counted = sum(i.get("teleports", 0) for i in infos if i.get("sim_done"))
    assert flagged == counted >= 1


def test_step_after_the_tour_ended_raises(tiny_benchmark):
    from ivln_ce.env.tour_env import TourFinishedError

    env = make_env(tiny_benchmark)
    infos = run_tour(env, StopAgent(), 0)
    assert "tour_path" in infos[-1]
    path = env.tour_path
    with pytest.raises(TourFinishedError):
        env.step(STOP)
    assert env.tour_path == path  # no spurious oracle walk was logged


def test_sed_is_computed_from_actions(tiny_benchmark):
    env = make_env(tiny_benchmark)
    agent = OracleAgent(env, goal_radius=0.5)
    obs, info = env.reset(options={"tour": 0})
    while "metrics" not in info:
        obs, _, done, _, info = env.step(agent.act(obs, info))
    assert info["metrics"]["sed"] == 1.0  # same follower, same start: the expert's actions
    env2 = make_env(tiny_benchmark)
    obs, info = env2.reset(options={"tour": 0})
    for a in (MOVE_FORWARD, MOVE_FORWARD, STOP):
        obs, _, _, _, info = env2.step(a)
    assert info["metrics"]["sed"] == 0.0  # failed episodes score 0


def test_distance_to_goal_is_requeried_only_after_a_move(tiny_benchmark):
    """SPEC §2.7 / M12: turning in place reuses the last distance-to-goal query."""
    env = make_env(tiny_benchmark)
    calls = []
    real = env.sim.geodesic_distance

    def counting(a, b):
        calls.append((tuple(np.round(a, 6)), tuple(np.round(b, 6))))
        return real(a, b)

    env.sim.geodesic_distance = counting
    obs, info = env.reset(options={"tour": 0})
    goal = tuple(np.round(env.episode.goal_position, 6))
    before = sum(1 for c in calls if c[1] == goal)
    for _ in range(4):
        env.step(2)  # TURN_LEFT: no movement
    assert sum(1 for c in calls if c[1] == goal) == before
    env.step(MOVE_FORWARD)
    assert sum(1 for c in calls if c[1] == goal) == before + 1


def test_expert_sensor_and_its_history_switch(tiny_benchmark):
    for every in (False, True):
        env = make_env(tiny_benchmark, [f"env.expert_query_every_observation={every}"])
        env = TourEnv(env.sim, env.tours, env.cfg, env.references, env.scenes_dir, expert=True)
        obs, info = env.reset(options={"tour": 0})
        assert "expert_action" in obs and obs["expert_action"] in (0, 1, 2, 3)
        queries = []
        real = env.expert.next_action
        env.expert.next_action = lambda *a, **k: (queries.append(env.phase), real(*a, **k))[1]
        while not info.get("sim_done"):
            obs, _, done, _, info = env.step(STOP if info["produce_action"] else 0)
        oracle_queries = [p for p in queries if p != 0]
        assert bool(oracle_queries) == every  # R9: oracle steps enter the expert's history only officially


def test_heading_alignment_terminates_at_the_half_step_boundary():
    """A heading error within rounding of 7.5 deg must not turn back and forth forever."""
    from ivln_ce.sim.follower import GreedyFollower

    class Flat:
        def geodesic_distance(self, a, b):
            return float(np.linalg.norm(np.asarray(a) - np.asarray(b)))

        def try_step(self, s, e):
            return np.asarray(e, float), False

        def distance_to_obstacle(self, p):
            return 10.0

    turn = math.radians(15)
    for err in (math.radians(7.5), math.radians(7.5) + 1e-10, math.radians(7.5) - 1e-10, -math.radians(7.5), math.radians(7.5) + 2e-9):
        f = GreedyFollower(Flat(), 0.25)
        heading, target = 0.0, err
        for n in range(30):
            a = f.next_action([0, 0, 0], heading, [0, 0, 0], target)
            if a == STOP:
                break
            heading += turn if a == 2 else -turn
        assert a == STOP and n <= 1, (err, n)


def test_goal_distances_are_the_geodesics_of_the_agent_path(tiny_benchmark):
    """The agent-done info carries d(p_t, goal) for every point of the agent path (the
    rewards of ``ivln_ce.rl`` are computed from them)."""
    env = make_env(tiny_benchmark, ["env.max_agent_steps=6"])
    obs, info = env.reset(options={"tour": 0})
    goal = np.asarray(env.episode.goal_position)
    for a in (MOVE_FORWARD, 2, MOVE_FORWARD, MOVE_FORWARD, 3, MOVE_FORWARD):
        obs, _, _, _, info = env.step(a)
    assert info["agent_done"]
    path, dists = np.asarray(info["agent_path"]), info["goal_distances"]
    assert len(dists) == len(path) == 7
    assert dists == [env.sim.geodesic_distance(p, goal) for p in path]
    assert dists[-1] == pytest.approx(info["metrics"]["distance_to_goal"])
