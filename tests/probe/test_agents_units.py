"""The grounding actions, the reference agents' distributions by hand, the teacher's walk on a
hand-built grid, and the learned-policy scorer's wiring (the teacher's action is what it remembers)."""

import math

import numpy as np
import pytest

from ivln_ce.data.vocab import PAD_INDEX
from ivln_ce.probe.driver import ProbeDriver, ProbeRunError
from ivln_ce.probe.grounding import check_distribution, correct_actions, correct_mass
from ivln_ce.probe.probe_set import ProbeCase
from ivln_ce.probe.reference_agents import MEAN_ABS_HEADING, forward_biased_distribution, oracle_distribution
from ivln_ce.probe.teacher import TeacherPlan
from ivln_ce.rollout.streams import StreamView
from ivln_ce.sim.base import MOVE_FORWARD, STOP, TURN_LEFT, TURN_RIGHT


def test_grounding_actions():
    assert correct_actions("stop") == (STOP,)
    assert correct_actions("direction", "forward") == (MOVE_FORWARD,)
    assert correct_actions("direction", "back_left") == correct_actions("direction", "left") == (TURN_LEFT,)
    assert correct_actions("direction", "back_right") == correct_actions("direction", "right") == (TURN_RIGHT,)
    assert set(correct_actions("direction", "backward")) == {TURN_LEFT, TURN_RIGHT}
    assert correct_mass([0.1, 0.2, 0.3, 0.4], (TURN_LEFT, TURN_RIGHT)) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="unknown target sector"):
        correct_actions("direction", "up")
    with pytest.raises(ValueError, match="summing to 1"):
        check_distribution([0.5, 0.5, 0.5, 0.0], "x")


def test_forward_biased_by_hand():
    assert MEAN_ABS_HEADING == pytest.approx({"forward": 15, "left": 60, "back_left": 120, "backward": 165,
                                              "back_right": 120, "right": 60})
    w = {"forward": 1 / 15, "left": 1 / 60, "backward": 1 / 165}
    z = sum(w.values())
    p = forward_biased_distribution(["backward", "left", "forward"])
    assert p == pytest.approx([0.0, w["forward"] / z, (w["left"] + w["backward"] / 2) / z, w["backward"] / 2 / z])
    assert forward_biased_distribution(["right"]) == pytest.approx([0, 0, 0, 1])


def _case(skill="direction", sector="left"):
    from ivln_ce.data.episodes import Episode, Goal

    tokens = {"no_intervention": [5, 6, 7] + [PAD_INDEX] * 5, "intervention": [5, 6, 7, 9, 10, 11] + [PAD_INDEX] * 2}
    eps = {c: Episode(episode_id=f"p.{c}", trajectory_id="t", scene_id="s/s.glb", start_position=[0, 0, 0],
                      start_rotation=[0, 0, 0, 1], info={"geodesic_distance": 1.0}, goals=[Goal([0, 0, -1], 3.0)],
                      instruction_text="x", instruction_tokens=t, reference_path=[[0, 0, 0], [0, 0, -1]])
           for c, t in tokens.items()}
    meta = {"probe_id": "p", "skill": skill, "target_sector": sector, "intervention_tokens": [3, 6],
            "intervened_condition": "intervention", "free_sectors": ["forward", "left"], "heading": 0.0}
    return ProbeCase("p", skill, meta, eps, "fp")


def test_the_oracle_reads_the_instruction_it_sees():
    case = _case()
    tok = case.episodes["intervention"].instruction_tokens
    assert oracle_distribution(case, np.array(tok)) == pytest.approx([0, 0, 1, 0])
    assert oracle_distribution(case, np.array(case.episodes["no_intervention"].instruction_tokens)) == pytest.approx([0.25] * 4)
    assert oracle_distribution(case, np.array(tok[:6] + [4, 0])) == pytest.approx([0.25] * 4)  # more words follow I_int


class Recorder:
    image_keys = ()
    timings: dict = {}

    def __init__(self):
        self.calls = []

    def step(self, views, executed, rollout=None):
        self.calls.append([(v.stream_id, a) for v, a in zip(views, executed)])
        return np.full((len(views), 4), 0.25)

    def record(self, streams, actions):
        raise AssertionError("no rollout: the driver chooses no action")

    def drop(self, stream):
        pass


def _view(stream, eid, pos, step=0):
    return StreamView(stream, 0, 0, eid, "s", {"position": np.array(pos, dtype=np.float32), "heading": np.array([0.0]),
                                               "instruction": np.zeros(4)},
                      {"episode_id": eid, "produce_action": True, "phase": "agent"})


def test_the_driver_executes_the_plan_and_reads_at_its_end():
    plan = TeacherPlan((MOVE_FORWARD, TURN_LEFT), np.array([[0, 0, 0], [0, 0, -0.25], [0, 0, -0.25]], float), np.zeros(3))
    got, scorer = [], Recorder()
    d = ProbeDriver(scorer, {"a": plan, "b": TeacherPlan((), np.zeros((1, 3)), np.zeros(1))}, got.append)
    assert d.decide([_view("s1:a", "a", [0, 0, 0]), _view("s2:b", "b", [0, 0, 0])]) == [MOVE_FORWARD, STOP]
    assert [r.episode_id for r in got] == ["b"] and got[0].steps == 0
    assert d.decide([_view("s1:a", "a", [0, 0, -0.25])]) == [TURN_LEFT]
    assert d.decide([_view("s1:a", "a", [0, 0, -0.25])]) == [STOP]
    assert [r.episode_id for r in got] == ["b", "a"] and got[1].steps == 2
    assert scorer.calls[0] == [("s1:a", MOVE_FORWARD), ("s2:b", STOP)]  # the scorer is told what was executed
    with pytest.raises(ProbeRunError, match="from the planned"):
        ProbeDriver(Recorder(), {"a": plan}, got.append).decide([_view("s3:a", "a", [1, 0, 0])])
    fresh = ProbeDriver(Recorder(), {"a": plan}, got.append)
    fresh.decide([_view("s4:a", "a", [0, 0, 0])])
    with pytest.raises(ProbeRunError, match="ended before its reading"):
        fresh.drop("s4:a")


def test_the_teacher_walks_every_point_of_tau():
    from ivln_ce.probe.teacher import plan_teacher
    from tests.probe.grids import GridSim, room_with_wall

    class Walker(GridSim):
        """GridSim plus the moves a follower needs."""

        def __init__(self, grid):
            super().__init__(grid)
            self.pos, self.heading = np.zeros(3), 0.0

        def set_agent_state(self, p, h):
            self.pos, self.heading = np.asarray(p, float), float(h)

        def get_agent_state(self):
            from types import SimpleNamespace
            return SimpleNamespace(position=self.pos.copy(), heading=self.heading)

        def distance_to_obstacle(self, p):
            return self.grid.distance_to_obstacle(p)

        def make_follower(self, r):
            from ivln_ce.sim.follower import GreedyFollower
            return GreedyFollower(self, r)

        def step(self, a):
            if a == MOVE_FORWARD:
                self.pos, _ = self.try_step(self.pos, self.pos + 0.25 * np.array([-math.sin(self.heading), 0, -math.cos(self.heading)]))
            elif a in (TURN_LEFT, TURN_RIGHT):
                self.heading += math.radians(15) * (1 if a == TURN_LEFT else -1)

    sim = Walker(room_with_wall())
    path = [[0.0, 0.0, 2.0], [2.0, 0.0, 2.0], [2.0, 0.0, 0.0]]  # right, then ahead: a corner tau must turn
    plan = plan_teacher(sim, path[0], 0.0, path, arrival_heading=0.0)
    assert STOP not in plan.actions and len(plan.positions) == len(plan.actions) + 1
    gaps = [np.linalg.norm(plan.positions[:, [0, 2]] - np.array(p)[[0, 2]], axis=1).min() for p in path[1:]]
    assert max(gaps) < 0.25  # it passed each point within the waypoint radius
    assert abs(math.degrees(plan.final_heading)) <= 7.5 + 1e-6


def test_the_policy_scorer_returns_the_softmax_and_remembers_the_teacher():
    torch = pytest.importorskip("torch", reason="the policy scorer needs torch")
    from omegaconf import OmegaConf

    from ivln_ce.probe.policy_scorer import PolicyScorer

    class FakeAgent:
        image_needs, mapper, depth_encoder, rgb_encoder, timings = set(), None, None, None, {}

        def __init__(self):
            self.policy = type("P", (), {"last_logits": torch.tensor([[0.0, 1.0, 2.0, 3.0], [5.0, 0.0, 0.0, 0.0]])})()
            self.recorded = []

        def rows(self, views):
            return list(range(len(views)))

        def act(self, views, batch):
            assert batch["instruction"].shape[0] == len(views)
            return [3, 0]  # its own choice, which must not be remembered

        def record(self, streams, actions):
            self.recorded.append((list(streams), list(actions)))

        def drop(self, s):
            pass

    agent = FakeAgent()
    cfg = OmegaConf.create({"simulator": {"sensors": []}})
    scorer = PolicyScorer(cfg, 10, agent=agent)
    views = [_view("s1:a", "a", [0, 0, 0]), _view("s2:b", "b", [0, 0, 0])]
    for v in views:
        v.obs["progress"] = np.zeros(1, np.float32)
        v.info.update(episode_memory_reset=False, tour_start=False)
    p = scorer.step(views, [MOVE_FORWARD, TURN_LEFT])
    assert p == pytest.approx(torch.softmax(agent.policy.last_logits, 1).numpy())
    assert agent.recorded == [(["s1:a", "s2:b"], [MOVE_FORWARD, TURN_LEFT])]


def test_limit_spreads_over_the_sorted_ids_so_every_house_is_sampled():
    from ivln_ce.probe.probe_set import spread

    names = [f"stop-e{house}{k:02d}-p1" for house in (1, 2, 3) for k in range(10)]  # 10 probes per house, sorted
    got = spread(names, 3)
    assert got == [names[0], names[10], names[20]]  # one per house, where the first 3 would all be house 1
    assert spread(names, 4) == [names[0], names[7], names[15], names[22]]
    assert spread(names, 0) == names and spread(names, 30) == names and spread(names, 99) == names
    assert set(spread(names, 5)) <= set(spread(names, 10))  # a smaller even stride is a subset here
