"""HabitatSimulator against a strict fake of the habitat-sim 0.2/0.3 API (tests/sim/fake_habitat_sim.py).

habitat-sim cannot be installed here, so these tests check that the backend calls the real API
with the right names, argument types and query patterns, and that it turns what habitat-sim
returns into the protocol's values. Expected numbers come from the fake world's geometry
(axis-aligned rectangles), never from the backend under test.
"""

import math

import numpy as np
import pytest

from ivln_ce.config import load_config
from ivln_ce.geometry import forward_vector, wrap_angle
from ivln_ce.scenes.categories import CATEGORIES, _CLASS_INDEX, _USE_RAW, map_class
from ivln_ce.scenes.layout import generate_house
from ivln_ce.sim import TASK_SEED, make_simulator, resolve_gpu_device
from ivln_ce.sim.base import MOVE_FORWARD, STOP, TURN_LEFT, TURN_RIGHT, SimulatorError, Simulator
from tests.sim import fake_habitat_sim as fake

ROOM = fake.Rect(0.0, 6.0, 0.0, 4.0)  # island 0
CLOSET = fake.Rect(20.0, 22.0, 20.0, 22.0)  # island 1, unreachable from the room
H, W = 6, 8


def cfg(*overrides, sensors=("rgb", "depth", "semantic")):
    base = [
        "simulator.backend=habitat",
        f"simulator.sensors=[{','.join(sensors)}]",
        f"simulator.rgb.width={W}", f"simulator.rgb.height={H}",
        f"simulator.depth.width={W}", f"simulator.depth.height={H}",
        f"simulator.semantic.width={W}", f"simulator.semantic.height={H}",
    ]
    return load_config(None, base + list(overrides)).simulator


def _render(kind, h, w):
    if kind == fake.SensorType.DEPTH:
        d = np.full((h, w), 5.0, np.float32)
        d[0, 0] = 0.0  # ray hit nothing
        d[0, 1] = 12.0  # beyond max_depth
        d[0, 2] = 10.0
        return d
    if kind == fake.SensorType.SEMANTIC:
        ids = np.zeros((h, w), np.uint32)
        ids[1, :7] = [3, 5, 7, 8, 9, 2, 250]
        return ids
    return fake._default_render(kind, h, w)


OBJECTS = [
    None,  # real object lists have holes
    ("0_0_1", "wall", "wall"),
    ("0_0_2", "appliances", "refrigerator"),
    ("0_1_3", "bed", "bed"),
    ("0_1_5", "furniture", "sofa"),  # furniture -> raw name, which is a class
    ("0_1_7", "furniture", "chest of drawers"),  # raw MP3D spelling: not one of the 12 names
    ("0_1_8", "chair", "armchair"),
    ("0_2_9", None, None),  # object without a category
]


def install(monkeypatch, version="0.3.3", egl=True):
    """The fake habitat-sim of ``version``, installed next to the numpy its release pins."""
    hub = fake.install(monkeypatch, version=version, egl=egl)
    monkeypatch.setattr("ivln_ce.sim.habitat._numpy_version", lambda: fake.PAIRED_NUMPY[version])
    return hub


@pytest.fixture(params=["0.2.5", "0.3.3"])
def hab(request, monkeypatch, tmp_path):
    """Every backend test runs against both modelled releases."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    hub = install(monkeypatch, request.param)
    scene = str(tmp_path / "room.glb")
    (tmp_path / "room.navmesh").write_bytes(b"fake navmesh")
    hub.worlds[scene] = fake.World([ROOM, CLOSET], objects=OBJECTS, render=_render)
    hub.scene = scene
    return hub


def make(hub, *overrides, seed=TASK_SEED, sensors=("rgb", "depth", "semantic")):
    from ivln_ce.sim.habitat import HabitatSimulator

    sim = HabitatSimulator(cfg(*overrides, sensors=sensors), seed=seed)
    sim.load_scene(hub.scene)
    return sim


# ---------------------------------------------------------------------------- the fake itself
def test_fake_rejects_what_the_real_api_lacks(hab):
    import habitat_sim

    sim = make(hab)
    with pytest.raises(AttributeError):
        sim.sim.previous_step_collided  # habitat-lab's wrapper has it, habitat_sim.Simulator does not
    with pytest.raises(AttributeError):
        habitat_sim.SimulatorConfiguration().scene = "x"  # 0.1 name; 0.2+ is scene_id
    with pytest.raises(AttributeError):
        habitat_sim.CameraSensorSpec().fov = 90.0
    with pytest.raises(AttributeError):
        habitat_sim.MultiGoalShortestPath().closest_end_point_index  # not in 0.2.2
    with pytest.raises(TypeError):
        habitat_sim.SimulatorConfiguration().random_seed = -1  # C++ unsigned int
    with pytest.raises(AttributeError):
        habitat_sim.does_not_exist


# ---------------------------------------------------------------------------- set-up
def test_configuration_reaches_habitat_sim(hab, monkeypatch, tmp_path):
    monkeypatch.setenv("LOCAL_RANK", "5")  # an explicit device wins over the local rank
    dataset = tmp_path / "mp3d.scene_dataset_config.json"
    dataset.write_text("{}")
    sim = make(hab, "simulator.gpu_device_id=2", f"simulator.scene_dataset_config={dataset}", seed=107)
    config = hab.sim.config
    sc = config.sim_cfg
    assert sc.scene_id == hab.scene
    assert sc.scene_dataset_config_file == str(dataset)
    assert sc.gpu_device_id == 2 and hab.sim.gpu_device == 2
    assert sc.random_seed == 107
    assert sc.allow_sliding is True and sc.enable_physics is False
    (agent,) = config.agents
    assert (agent.height, agent.radius) == (1.5, 0.1)
    specs = {s.uuid: s for s in agent.sensor_specifications}
    assert set(specs) == {"rgb", "depth", "semantic"}
    assert specs["depth"].sensor_type == fake.SensorType.DEPTH
    assert specs["semantic"].sensor_type == fake.SensorType.SEMANTIC
    assert specs["rgb"].sensor_type == fake.SensorType.COLOR
    for s in specs.values():
        assert s.resolution == [H, W]
        np.testing.assert_allclose(s.position, [0.0, 1.25, 0.0])
        assert s.hfov == 90.0
    amounts = {k: (a.name, a.actuation.amount) for k, a in agent.action_space.items()}
    assert amounts == {"move_forward": ("move_forward", 0.25), "turn_left": ("turn_left", 15.0), "turn_right": ("turn_right", 15.0)}
    assert hab.sim._values["seeds"] == [107]  # Simulator.seed after the scene (and its navmesh) loaded
    sim.close()
    assert hab.sim._values["closed"]


def test_gpu_device_follows_local_rank(hab, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    make(hab)  # simulator.gpu_device_id defaults to -1
    assert hab.sim.config.sim_cfg.gpu_device_id == 3
    monkeypatch.delenv("LOCAL_RANK")
    make(hab)
    assert hab.sim.config.sim_cfg.gpu_device_id == 0


def test_resolve_gpu_device(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert resolve_gpu_device(cfg()) == 0
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_gpu_device(cfg()) == 1
    assert resolve_gpu_device(cfg("simulator.gpu_device_id=0")) == 0
    monkeypatch.setenv("LOCAL_RANK", "one")
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        resolve_gpu_device(cfg())


def test_make_simulator_passes_the_seed(hab):
    assert make_simulator(cfg(), seed=TASK_SEED + 3).random_seed == 103  # worker 3 (SPEC §2.1)
    assert make_simulator(cfg()).random_seed == 100
    embedded = load_config(None, ["simulator.sensors=[]"]).simulator
    assert make_simulator(embedded, seed=101).navmesh_source == "embedded grid, cell 0.05 m"
    with pytest.raises(SimulatorError, match="seed"):
        make_simulator(cfg(), seed=-1)


# ---------------------------------------------------------------------------- navmesh
def test_shipped_navmesh_is_loaded_and_reported(hab):
    sim = make(hab)
    navmesh = hab.scene[: -len(".glb")] + ".navmesh"
    assert sim.navmesh_source == navmesh
    calls = hab.sim.pathfinder._values["calls"]
    # habitat-sim 0.2.5+ loads it in C++ (no Python call); the backend loads it once more
    assert calls.count(("load_nav_mesh", navmesh)) == 1
    assert hab.sim.pathfinder._values["loaded_from"] == navmesh
    assert hab.sim._values["recomputes"] == []
    assert isinstance(sim, Simulator)


def test_navmesh_recomputed_for_the_agent_body_when_missing(hab, tmp_path):
    scene = str(tmp_path / "bare.glb")
    hab.worlds[scene] = fake.World([ROOM])
    hab.scene = scene
    sim = make(hab, sensors=())
    (settings,) = hab.sim._values["recomputes"]
    assert settings._values.get("set_defaults_called")
    assert (settings.agent_radius, settings.agent_height, settings.agent_max_climb) == (0.1, 1.5, 0.2)
    assert sim.navmesh_source == "recomputed for the VLN-CE body (radius 0.1 m, height 1.5 m, climb 0.2 m)"
    assert sim.geodesic_distance([1, 0, 1], [4, 0, 1]) == pytest.approx(3.0)


def test_navmesh_found_by_the_dataset_is_kept(hab, tmp_path):
    scene = str(tmp_path / "ds.glb")
    hab.worlds[scene] = fake.World([ROOM], dataset_navmesh=True)
    hab.scene = scene
    dataset = tmp_path / "mp3d.scene_dataset_config.json"
    dataset.write_text("{}")
    sim = make(hab, f"simulator.scene_dataset_config={dataset}", sensors=())
    assert hab.sim._values["recomputes"] == []
    assert sim.navmesh_source == f"loaded by habitat-sim from the scene dataset ({dataset})"


def test_navmesh_source_before_loading_and_for_the_embedded_grid():
    from ivln_ce.sim.embedded import EmbeddedSimulator
    from ivln_ce.sim.habitat import HabitatSimulator

    assert HabitatSimulator(cfg()).navmesh_source == "none (no scene loaded)"
    embedded = load_config(None, ["simulator.sensors=[]", "simulator.nav_cell=0.1"]).simulator
    assert EmbeddedSimulator(embedded).navmesh_source == "embedded grid, cell 0.1 m"


# ---------------------------------------------------------------------------- agent
def test_agent_state_round_trip(hab):
    sim = make(hab, sensors=())
    sim.set_agent_state([1.5, 0.0, 2.0], 0.7)
    s = sim.get_agent_state()
    np.testing.assert_allclose(s.position, [1.5, 0.0, 2.0], atol=1e-6)
    assert s.heading == pytest.approx(0.7, abs=1e-6)
    (call,) = hab.sim.get_agent(0)._values["set_calls"]
    assert call["reset_sensors"] is True
    np.testing.assert_allclose(call["rotation"], [0.0, math.sin(0.35), 0.0, math.cos(0.35)])  # [x, y, z, w]
    sim.set_agent_state([1.0, 0.0, 1.0], 3 * math.pi / 2)
    assert sim.get_agent_state().heading == pytest.approx(-math.pi / 2, abs=1e-6)


def test_step_every_action_and_collision_from_the_step_observations(hab):
    sim = make(hab)
    sim.set_agent_state([3.0, 0.0, 2.0], 0.4)
    res = sim.step(MOVE_FORWARD)
    assert res.collided is False
    np.testing.assert_allclose(sim.get_agent_state().position, [3.0, 0.0, 2.0] + 0.25 * forward_vector(0.4), atol=1e-5)
    assert res.observations.depth.shape == (H, W, 1)
    sim.step(TURN_LEFT)
    assert wrap_angle(sim.get_agent_state().heading - 0.4) == pytest.approx(math.radians(15), abs=1e-6)
    sim.step(TURN_RIGHT)
    sim.step(TURN_RIGHT)
    assert wrap_angle(sim.get_agent_state().heading - 0.4) == pytest.approx(-math.radians(15), abs=1e-6)
    assert hab.sim._values["step_calls"] == ["move_forward", "turn_left", "turn_right", "turn_right"]
    # facing the wall at z = 0 from 0.1 m away at 30 deg: the step slides along it and collides
    sim.set_agent_state([3.0, 0.0, 0.1], math.radians(30))
    res = sim.step(MOVE_FORWARD)
    assert res.collided is True
    p = sim.get_agent_state().position
    assert p[2] == pytest.approx(0.0, abs=1e-6) and p[0] < 3.0 - 0.1  # slid along -x
    before = sim.get_agent_state()
    res = sim.step(STOP)
    assert res.collided is False and len(hab.sim._values["step_calls"]) == 5  # STOP never reaches habitat
    np.testing.assert_allclose(sim.get_agent_state().position, before.position)
    with pytest.raises(SimulatorError, match="unknown action"):
        sim.step(7)


# ---------------------------------------------------------------------------- sensors
def test_observations_depth_rgb_and_semantic12(hab):
    sim = make(hab)
    sim.set_agent_state([1.0, 0.0, 1.0], 0.0)
    obs = sim.get_observations()
    assert obs.rgb.shape == (H, W, 3) and obs.rgb.dtype == np.uint8
    np.testing.assert_array_equal(obs.rgb[0, :, 0], np.arange(W))
    assert obs.depth.shape == (H, W, 1) and obs.depth.dtype == np.float32
    assert obs.depth[0, 0, 0] == 0.0  # no hit stays 0 (SPEC §2.3)
    assert obs.depth[0, 1, 0] == 1.0  # beyond 10 m clips to 1
    assert obs.depth[0, 2, 0] == 1.0
    assert obs.depth[1, 1, 0] == pytest.approx(0.5)
    # instance ids 3 bed, 5 furniture/sofa, 7 furniture/"chest of drawers", 8 chair, 9 no category,
    # 2 appliances/refrigerator, 250 not annotated
    np.testing.assert_array_equal(obs.semantic[1, :7], [3, 5, 7, 8, 9, 2, 250])
    np.testing.assert_array_equal(obs.semantic12[1, :7], [3, 6, 0, 8, 0, 0, 0])
    assert obs.semantic12.dtype == np.uint8 and obs.semantic12.shape == (H, W)
    calls = hab.worlds[hab.scene].name_calls
    assert set(calls) == {"mpcat40", "raw"}  # never name() / name(""), which is the mpcat40 name


# ---------------------------------------------------------------------------- navigation
def test_geodesic_uses_one_multigoal_path_per_goal(hab):
    sim = make(hab, sensors=())
    goal = [5.0, 0.0, 3.0]
    starts = [[1.0, 0.0, 1.0], [2.0, 0.0, 1.0], [2.0, 0.0, 2.5]]
    for s in starts:
        assert sim.geodesic_distance(s, goal) == pytest.approx(float(np.linalg.norm(np.subtract(goal, s))), abs=1e-5)
    assert hab.created.get("ShortestPath", 0) == 0
    assert hab.created["MultiGoalShortestPath"] == 1
    (path,) = sim._goal_paths.values()
    assert path._values["ends_assignments"] == 1  # requested_ends set once, reused by every query
    finds = [c for c in hab.sim.pathfinder._values["calls"] if c[:2] == ("find_path", "MultiGoalShortestPath")]
    assert len(finds) == 3 and {c[2] for c in finds} == {id(path)}
    assert sim.geodesic_distance(starts[0], [1.0, 0.0, 3.0]) == pytest.approx(2.0)
    assert hab.created["MultiGoalShortestPath"] == 2  # a new goal gets its own path object
    assert sim.geodesic_distance(starts[0], [21.0, 0.0, 21.0]) == math.inf  # other island
    assert not sim.same_island(starts[0], [21.0, 0.0, 21.0]) and sim.same_island(starts[0], goal)


def test_goal_paths_are_dropped_when_the_scene_changes(hab, tmp_path):
    sim = make(hab, sensors=())
    sim.geodesic_distance([1.0, 0.0, 1.0], [5.0, 0.0, 3.0])
    other = str(tmp_path / "other.glb")
    hab.worlds[other] = fake.World([fake.Rect(0.0, 6.0, 0.0, 4.0)])
    sim.load_scene(other)
    assert len(sim._goal_paths) == 0
    sim.geodesic_distance([1.0, 0.0, 1.0], [5.0, 0.0, 3.0])
    assert hab.created["MultiGoalShortestPath"] == 2


def test_shortest_path_points_and_unreachable(hab):
    sim = make(hab, sensors=())
    pts = sim.shortest_path([1.0, 0.0, 1.0], [5.0, 0.0, 3.0])
    np.testing.assert_allclose(pts[0], [1.0, 0.0, 1.0])
    np.testing.assert_allclose(pts[-1], [5.0, 0.0, 3.0])
    assert sim.shortest_path([1.0, 0.0, 1.0], [21.0, 0.0, 21.0]) == []


def test_snap_navigability_and_seeded_sampling(hab):
    sim = make(hab, sensors=())
    np.testing.assert_allclose(sim.snap_point([7.0, 0.3, 2.0]), [6.0, 0.0, 2.0])
    assert np.all(np.isnan(sim.snap_point([50.0, 0.0, 50.0])))
    assert sim.is_navigable([3.0, 0.0, 2.0]) and not sim.is_navigable([7.0, 0.0, 2.0])
    a = [sim.sample_navigable_point(np.random.default_rng(4)) for _ in range(2)]
    np.testing.assert_array_equal(a[0], a[1])  # same generator state, same point
    pts = [sim.sample_navigable_point(r) for r in [np.random.default_rng(9)] * 5]
    assert len({tuple(p) for p in pts}) == 5
    assert all(sim.is_navigable(p) for p in pts)
    seeds = [c[1] for c in hab.sim.pathfinder._values["calls"] if c[0] == "seed"]
    assert all(isinstance(s, int) and 0 <= s < 2**31 for s in seeds)
    hab.worlds[hab.scene].sampling_fails = True
    with pytest.raises(SimulatorError, match="no navigable point"):
        sim.sample_navigable_point(np.random.default_rng(0))


def test_try_step_collision_flag_follows_habitat_controls(hab):
    sim = make(hab, sensors=())
    end, collided = sim.try_step([3.0, 0.0, 2.0], [3.0, 0.0, 1.75])
    np.testing.assert_allclose(end, [3.0, 0.0, 1.75], atol=1e-6)
    assert collided is False
    end, collided = sim.try_step([3.0, 0.0, 0.1], [2.8, 0.0, -0.1])  # into the wall: slides
    np.testing.assert_allclose(end, [2.8, 0.0, 0.0], atol=1e-6)
    assert collided is True
    # 15 um short of a 0.25 m step: 7.5e-6 in squared distance, below habitat-sim's 1e-5 epsilon
    end, collided = sim.try_step([3.0, 0.0, 0.25], [3.0, 0.0, -1.5e-5])
    assert collided is False
    end, collided = sim.try_step([3.0, 0.0, 0.25], [3.0, 0.0, -1e-3])  # 1 mm short: 5e-4, collided
    assert collided is True


def test_distance_to_obstacle(hab):
    sim = make(hab, sensors=())
    assert sim.distance_to_obstacle([1.0, 0.0, 2.0]) == pytest.approx(1.0)
    assert sim.distance_to_obstacle([3.0, 0.0, 2.0]) == pytest.approx(2.0)  # capped at the search radius
    assert ("distance_to_closest_obstacle", 2.0) in hab.sim.pathfinder._values["calls"]


def test_follower_walks_to_a_goal_on_the_fake_navmesh(hab):
    sim = make(hab, sensors=())
    sim.set_agent_state([1.0, 0.0, 1.0], 0.0)
    follower = sim.make_follower(goal_radius=0.25)
    goal = np.array([5.0, 0.0, 3.0])
    for _ in range(100):
        s = sim.get_agent_state()
        action = follower.next_action(s.position, s.heading, goal)
        if action == STOP:
            break
        sim.step(action)
    assert sim.geodesic_distance(sim.get_agent_state().position, goal) < 0.25


# ---------------------------------------------------------------------------- the 13-class rule
def test_map_class_is_an_exact_match():
    assert map_class("bed", "bed") == 3
    assert map_class("furniture", "sofa") == 6
    assert map_class("furniture", "chest_of_drawers") == 2
    assert map_class("furniture", "chest of drawers") == 0  # official: raw MP3D spelling is void
    assert map_class("Bed", "Bed") == 0
    assert map_class("bed ", "bed") == 0
    assert map_class("appliances", "Sink") == 0


def test_generated_houses_keep_their_classes_under_the_exact_rule():
    def normalising(mpcat40, raw):  # the rule before it was made exact
        name = raw if mpcat40 in _USE_RAW else mpcat40
        return _CLASS_INDEX.get(name.strip().lower().replace(" ", "_"), 0)

    for cat in CATEGORIES.values():
        assert cat.class_id == normalising(cat.mpcat40, cat.raw), cat.raw
    for seed in range(4):
        for obj in generate_house(seed).objects:
            assert obj.class_id == normalising(obj.mpcat40, obj.category), obj.name


# ---------------------------------------------------------------------------- MP3D semantics (issue 14)
def mp3d_scene(hub, root, scan="scan1", house=True, **world):
    """A scan in the standard MP3D layout: <root>/mp3d/<scan>/<scan>.glb, .navmesh, .house."""
    folder = root / "mp3d" / scan
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{scan}.navmesh").write_bytes(b"fake navmesh")
    if house:
        (folder / f"{scan}.house").write_text("ASCII 1.1\n")
    scene = str(folder / f"{scan}.glb")
    hub.worlds[scene] = fake.World([ROOM], objects=OBJECTS, render=_render, mp3d=True, **world)
    return scene


def test_fake_renders_mp3d_semantics_misaligned_without_the_dataset_config(monkeypatch, tmp_path):
    """What the backend guards against: real habitat-sim gives no error, only wrong frames."""
    hub = install(monkeypatch)
    import habitat_sim

    scene = mp3d_scene(hub, tmp_path)

    def semantic_frame(dataset):
        sim_cfg = habitat_sim.SimulatorConfiguration()
        sim_cfg.scene_id = scene
        if dataset:
            sim_cfg.scene_dataset_config_file = dataset
        spec = habitat_sim.CameraSensorSpec()
        spec.uuid, spec.sensor_type, spec.resolution = "semantic", habitat_sim.SensorType.SEMANTIC, [H, W]
        agent = habitat_sim.agent.AgentConfiguration()
        agent.sensor_specifications = [spec]
        return habitat_sim.Simulator(habitat_sim.Configuration(sim_cfg, [agent])).get_sensor_observations()["semantic"]

    aligned = _render(fake.SensorType.SEMANTIC, H, W)
    np.testing.assert_array_equal(semantic_frame("mp3d.scene_dataset_config.json"), aligned)
    assert not np.array_equal(semantic_frame(None), aligned)


def test_semantic_sensor_on_mp3d_needs_the_scene_dataset_config(hab, tmp_path):
    hab.scene = mp3d_scene(hab, tmp_path)
    expected = tmp_path / "mp3d" / "mp3d.scene_dataset_config.json"
    with pytest.raises(SimulatorError, match=r"simulator.scene_dataset_config.*not there") as err:
        make(hab)
    assert hab.scene in str(err.value) and str(expected) in str(err.value)
    assert hab.simulators == []  # refused before habitat-sim renders anything
    expected.write_text("{}")
    with pytest.raises(SimulatorError, match="it is there"):
        make(hab)
    sim = make(hab, f"simulator.scene_dataset_config={expected}")
    obs = sim.get_observations()
    np.testing.assert_array_equal(obs.semantic[1, :7], [3, 5, 7, 8, 9, 2, 250])  # aligned
    assert make(hab, sensors=("rgb", "depth")).scene_id == hab.scene  # no semantic sensor: no need


def test_an_mp3d_folder_alone_marks_the_scene(hab, tmp_path):
    hab.scene = mp3d_scene(hab, tmp_path, house=False)  # .house missing but under mp3d/
    with pytest.raises(SimulatorError, match="scene_dataset_config"):
        make(hab)


def test_a_configured_dataset_config_must_exist(hab, tmp_path):
    missing = tmp_path / "nowhere" / "mp3d.scene_dataset_config.json"
    with pytest.raises(SimulatorError, match=rf"simulator.scene_dataset_config: {missing} does not exist"):
        make(hab, f"simulator.scene_dataset_config={missing}")


def test_paper_recipes_set_the_mp3d_dataset_config():
    from pathlib import Path

    paper = Path(__file__).resolve().parents[2] / "configs" / "paper"
    recipes = [p for p in paper.rglob("*.yaml") if p.name != "_common.yaml"]
    assert recipes
    for recipe in recipes:
        c = load_config(recipe, ["policy.checkpoint=x.pth", "policy.name=cma"])  # the keys recipes leave open
        assert c.simulator.scene_dataset_config == "data/scene_datasets/mp3d/mp3d.scene_dataset_config.json", recipe


# ---------------------------------------------------------------------------- scene changes (issue 15)
def test_scene_change_closes_the_previous_scene_first(hab, tmp_path):
    sim = make(hab, sensors=())
    first = hab.scene
    others = []
    for name in ("b", "c"):
        scene = str(tmp_path / f"{name}.glb")
        hab.worlds[scene] = fake.World([ROOM])
        others.append(scene)
        sim.load_scene(scene)
    assert len(hab.simulators) == 1  # one habitat-sim simulator, reconfigured
    assert hab.sim._values["close_calls"] == [False, False]  # close(destroy=False), as habitat-lab
    assert hab.sim._values["resident_scenes"] == [others[-1]]  # earlier scenes released
    sim.load_scene(first)  # back to the first scene: a different configuration again
    assert hab.sim._values["resident_scenes"] == [first]
    assert sim.geodesic_distance([1.0, 0.0, 1.0], [4.0, 0.0, 1.0]) == pytest.approx(3.0)
    sim.load_scene(first)  # the same scene: nothing happens
    assert hab.sim._values["close_calls"] == [False, False, False]


def test_fake_reconfigure_keeps_assets_and_is_a_no_op_for_an_equal_config(monkeypatch, tmp_path):
    hub = install(monkeypatch)
    import habitat_sim

    scenes = [str(tmp_path / f"{n}.glb") for n in "ab"]

    def config(scene):
        sim_cfg = habitat_sim.SimulatorConfiguration()
        sim_cfg.scene_id = scene
        return habitat_sim.Configuration(sim_cfg, [habitat_sim.agent.AgentConfiguration()])

    for scene in scenes:
        hub.worlds[scene] = fake.World([ROOM], dataset_navmesh=True)
    sim = habitat_sim.Simulator(config(scenes[0]))
    sim.reconfigure(config(scenes[1]))
    assert sim._values["resident_scenes"] == scenes  # reconfigure alone keeps the first scene
    sim.close(destroy=False)
    sim.reconfigure(config(scenes[1]))  # equal by value to the current config: a no-op
    assert sim.pathfinder is None


# ---------------------------------------------------------------------------- failures (issue 16)
def test_a_missing_semantic_scene_is_a_clear_error(hab):
    hab.worlds[hab.scene].semantic_descriptor = False
    with pytest.raises(SimulatorError, match="loaded no semantic scene") as err:
        make(hab)
    assert hab.scene in str(err.value) and "room.house" in str(err.value)


def test_empty_semantic_annotations_are_an_error_not_all_void(hab):
    hab.worlds[hab.scene].objects = [None]
    with pytest.raises(SimulatorError, match=r"no objects.*room.house are missing"):
        make(hab)
    assert make(hab, sensors=("rgb", "depth")).scene_id == hab.scene  # only the semantic sensor needs them


def test_sampling_on_a_navmesh_without_area_names_the_scene(hab, tmp_path):
    scene = str(tmp_path / "flat.glb")
    (tmp_path / "flat.navmesh").write_bytes(b"fake navmesh")
    hab.worlds[scene] = fake.World([fake.Rect(0.0, 0.0, 0.0, 0.0)])  # no navigable area
    hab.scene = scene
    sim = make(hab, sensors=())
    with pytest.raises(SimulatorError, match="no navigable area") as err:
        sim.sample_navigable_point(np.random.default_rng(0))
    assert scene in str(err.value)


def test_a_failed_load_leaves_nothing_a_retry_would_skip(hab, tmp_path):
    sim = make(hab, sensors=("semantic",))
    other = str(tmp_path / "other.glb")
    (tmp_path / "other.navmesh").write_bytes(b"fake navmesh")
    hab.worlds[other] = fake.World([ROOM], objects=OBJECTS, render=_render, semantic_descriptor=False)
    with pytest.raises(SimulatorError, match="other.glb"):
        sim.load_scene(other)
    assert sim.scene_id is None
    with pytest.raises(SimulatorError, match="no scene loaded"):
        sim.get_observations()
    hab.worlds[other].semantic_descriptor = True  # the annotations are back: the retry loads
    sim.load_scene(other)
    assert sim.scene_id == other and sim.navmesh_source.endswith("other.navmesh")
    np.testing.assert_array_equal(sim.get_observations().semantic12[1, :7], [3, 6, 0, 8, 0, 0, 0])
    assert sim.geodesic_distance([1.0, 0.0, 1.0], [4.0, 0.0, 1.0]) == pytest.approx(3.0)


def test_habitat_sim_load_errors_name_the_scene(hab, tmp_path):
    sim = make(hab, sensors=())
    unknown = str(tmp_path / "unknown.glb")
    with pytest.raises(SimulatorError, match=rf"{unknown}: habitat-sim could not load the scene: RuntimeError"):
        sim.load_scene(unknown)
    assert sim.scene_id is None


# ---------------------------------------------------------------------------- install traps (issue 17)
@pytest.mark.parametrize("version, expected", [
    ("0.2.5", "habitat-sim 0.2.5"),
    ("0.3.3", "habitat-sim 0.3.3"),
    ("0.3.4", "habitat-sim 0.3.4 (module __version__ 0.3.3)"),  # 0.3.4 did not bump __version__
])
def test_the_recorded_version_is_the_installed_distribution(monkeypatch, version, expected):
    from ivln_ce.sim.habitat import HabitatSimulator

    install(monkeypatch, version)
    import habitat_sim

    assert habitat_sim.__version__ == fake.VERSIONS[version]["module"]
    assert HabitatSimulator(cfg()).version == expected


def test_numpy_pairing_uses_the_distribution_version(caplog):
    from ivln_ce.sim.habitat import check_numpy_pairing

    v034 = {"module": "0.3.3", "distribution": "0.3.4"}
    check_numpy_pairing(v034, "2.2.6")  # right for 0.3.4, although __version__ says 0.3.3
    with pytest.raises(SimulatorError, match=r"habitat-sim 0.3.4 \(module __version__ 0.3.3\) needs numpy>=2.0,<2.4"):
        check_numpy_pairing(v034, "1.26.4")
    with pytest.raises(SimulatorError, match=r"habitat-sim 0.3.3 needs numpy==1.26.4 but numpy 2.1.0"):
        check_numpy_pairing({"module": "0.3.3", "distribution": "0.3.3"}, "2.1.0")
    with pytest.raises(SimulatorError, match="numpy>=1.20,<1.24"):
        check_numpy_pairing({"module": "0.2.5", "distribution": None}, "2.0.0")
    caplog.clear()
    check_numpy_pairing({"module": "0.3.3", "distribution": "0.3.3"}, "1.26.4")
    assert not caplog.records
    check_numpy_pairing({"module": "0.2.5", "distribution": "0.2.5"}, "1.26.4")  # the documented 0.2.5 set-up
    assert "pins numpy>=1.20,<1.24; running with numpy 1.26.4" in caplog.text


def test_numpy_across_the_2_0_line_is_refused_before_habitat_sim_starts(monkeypatch):
    hub = install(monkeypatch, "0.3.3")
    monkeypatch.setattr("ivln_ce.sim.habitat._numpy_version", lambda: "2.4.6")
    scene = "room.glb"
    hub.worlds[scene] = fake.World([ROOM])
    hub.scene = scene
    with pytest.raises(SimulatorError, match="different numpy ABIs"):
        make(hub, sensors=())
    assert hub.simulators == []


def test_a_glx_build_is_refused_for_another_gpu_before_it_aborts(monkeypatch, tmp_path):
    hub = install(monkeypatch, egl=False)
    scene = str(tmp_path / "room.glb")
    hub.worlds[scene] = fake.World([ROOM], dataset_navmesh=True)
    hub.scene = scene
    monkeypatch.setenv("LOCAL_RANK", "1")  # torchrun rank 1 renders on GPU 1
    monkeypatch.setenv("DISPLAY", ":0")
    with pytest.raises(SimulatorError, match=r"resolves to 1 \(LOCAL_RANK=1\).*GLX.*TARGET_EGL"):
        make(hub, sensors=())
    assert hub.simulators == []
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert make(hub, sensors=()).scene_id == scene  # GPU 0 with a display works
    monkeypatch.delenv("DISPLAY")
    with pytest.raises(SimulatorError, match="DISPLAY is not set"):
        make(hub, sensors=())
    egl = install(monkeypatch, egl=True)  # an EGL build renders on any GPU, without a display
    egl.worlds[scene], egl.scene = fake.World([ROOM], dataset_navmesh=True), scene
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert make(egl, sensors=()).gpu_device_id == 1


# ---------------------------------------------------------------------------- the fake's versions (issue 18)
def test_fake_points_follow_each_release(monkeypatch):
    """Eigen vec3f (0.2.5) converts integers; Magnum Vector3 (0.3.3+) takes only floats."""
    install(monkeypatch, "0.2.5")
    import habitat_sim

    spec = habitat_sim.CameraSensorSpec()
    spec.position = [0, 1, 0]
    spec.position = np.array([0, 1, 0])
    install(monkeypatch, "0.3.3")
    import habitat_sim

    spec = habitat_sim.CameraSensorSpec()
    with pytest.raises(TypeError, match="Python floats"):
        spec.position = [0, 1, 0]
    with pytest.raises(TypeError, match="float buffer"):
        spec.position = np.array([0, 1, 0])
    spec.position = [0.0, 1.25, 0.0]
    spec.position = np.array([0.0, 1.25, 0.0], np.float32)


def test_fake_multigoal_path_keeps_stale_end_flags(monkeypatch):
    """PathFinder keeps endIsValid across requested_ends assignments (the backend never re-assigns)."""
    hub = install(monkeypatch)
    import habitat_sim

    pathfinder = fake.PathFinder(fake.World([ROOM]))
    pathfinder._values.update(loaded=True, islands=[ROOM])
    path = habitat_sim.MultiGoalShortestPath()
    path.requested_start = np.array([1.0, 0.0, 1.0], np.float32)
    path.requested_ends = np.array([[50.0, 0.0, 50.0], [4.0, 0.0, 1.0]], np.float32)
    assert pathfinder.find_path(path) and path.geodesic_distance == pytest.approx(3.0)  # unsnappable end skipped
    path.requested_ends = np.array([[2.0, 0.0, 1.0], [50.0, 0.0, 50.0]], np.float32)
    assert not pathfinder.find_path(path)  # end 0 still flagged invalid from the first assignment
    fresh = habitat_sim.MultiGoalShortestPath()
    fresh.requested_start = path.requested_start
    fresh.requested_ends = np.array([[2.0, 0.0, 1.0]], np.float32)
    assert pathfinder.find_path(fresh) and fresh.geodesic_distance == pytest.approx(1.0)
    assert hub.version == "0.3.3"


def test_the_results_manifest_records_the_habitat_version(monkeypatch):
    from ivln_ce.evaluation.evaluator import simulator_record
    from ivln_ce.sim.habitat import HabitatSimulator

    install(monkeypatch, "0.3.4")
    worker = {"navmesh": "a.navmesh", "sim_version": HabitatSimulator(cfg()).version}  # a worker's ready message
    assert simulator_record("habitat", [worker, dict(worker)]) == {
        "backend": "habitat", "navmesh": ["a.navmesh"], "version": ["habitat-sim 0.3.4 (module __version__ 0.3.3)"]}
    assert simulator_record("embedded", [{"navmesh": "grid", "sim_version": None}]) == {"backend": "embedded", "navmesh": ["grid"]}


# ---------------------------------------------------------------------------- annotations for probes (issue 27)
UPPER = fake.Rect(0.0, 6.0, 0.0, 4.0, y=3.0)  # island 2: the floor above ROOM, no stairs to it
REGIONS = [
    ("0_0", "kitchen", (0.0, 0.0, 0.0), (3.0, 2.5, 4.0)),
    ("0_1", "familyroom/lounge", (6.0, 2.5, 0.0), (3.0, 0.0, 4.0)),  # corners swapped on x and y, as rotated
    ("1_2", "bedroom", (0.0, 3.0, 0.0), (6.0, 5.5, 4.0)),  # straight above ROOM
    ("0_3", "other room", (10.0, 0.0, 10.0), (12.0, 2.5, 12.0)),  # names no room: never a target
    ("0_4", None, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),  # no category: skipped
]


@pytest.fixture
def annotated(hab):
    hab.worlds[hab.scene] = fake.World([ROOM, CLOSET, UPPER], objects=OBJECTS, render=_render, regions=REGIONS)
    return hab


def test_semantic_annotations_read_objects_and_regions_of_both_box_types(annotated):
    sim = make(annotated, sensors=("rgb", "depth"))
    ann = sim.semantic_annotations()
    assert [(o.instance_id, o.raw_category, o.mpcat40) for o in ann.objects] == [
        (1, "wall", "wall"), (2, "refrigerator", "appliances"), (3, "bed", "bed"), (5, "sofa", "furniture"),
        (7, "chest of drawers", "furniture"), (8, "armchair", "chair")]
    got = [(r.region_id, r.label, r.lo, r.hi, r.level) for r in ann.regions]
    assert got == [
        (0, "kitchen", (0.0, 0.0, 0.0), (3.0, 2.5, 4.0), 0),
        (1, "familyroom/lounge", (3.0, 0.0, 0.0), (6.0, 2.5, 4.0), 0),  # sorted per axis
        (2, "bedroom", (0.0, 3.0, 0.0), (6.0, 5.5, 4.0), 1),
        (3, "other room", (10.0, 0.0, 10.0), (12.0, 2.5, 12.0), 0)]


def test_semantic_annotations_refuse_a_scene_without_a_semantic_scene(annotated):
    annotated.worlds[annotated.scene].semantic_descriptor = False
    sim = make(annotated, sensors=("rgb", "depth"))
    with pytest.raises(SimulatorError, match="no semantic scene"):
        sim.semantic_annotations()


def test_room_probe_targets_on_habitat_use_mp3d_names_and_stay_on_the_floor(annotated):
    from ivln_ce.probe.rooms import RoomFinder, RoomRule
    from ivln_ce.probe.semantics import scene_semantics

    sim = make(annotated, sensors=("rgb", "depth"))
    sem = scene_semantics(sim)
    assert {i: (o.name, o.structural) for i, o in sem.objects.items()} == {
        1: ("wall", True), 2: ("refrigerator", False), 3: ("bed", False), 5: ("sofa", False),
        7: ("chest of drawers", False), 8: ("armchair", False)}
    assert [(r.region_id, r.room_type) for r in sem.regions] == [
        (0, "kitchen"), (1, "family room"), (2, "bedroom"), (3, None)]
    p = np.array([1.0, 0.0, 2.0])
    assert [r.region_id for r in sem.regions_at(p)] == [0]  # the bedroom above holds x, z but not y
    assert [r.region_id for r in sem.regions_at([1.0, 3.0, 2.0])] == [2]
    targets, skipped, why = RoomFinder(sim, sem, RoomRule()).targets(p, -math.pi / 2)  # facing +x
    assert why is None and skipped == {"unreachable": 1}  # the bedroom: another floor, no stairs
    (t,) = targets
    # the family room's floor grid starts at x = 3.125, z = 0.125 + 0.25 k; the nearest points to
    # (1, 2) are z = 1.875 and 2.125, equally far; the first in row order wins
    assert (t.room_type, t.region_id, t.hops, t.variant) == ("family room", 1, 1, "1_hop")
    assert t.nearest_point == pytest.approx((3.125, 0.0, 1.875))
    assert t.geodesic_distance == pytest.approx(math.hypot(2.125, 0.125), abs=1e-4)
    assert t.current_type == "kitchen" and abs(t.relative_deg) < 15
