import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the mapper runs on torch")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.mapping.egocentric import render  # noqa: E402
from ivln_ce.mapping.mapper import KnownMaps, Mapper, build_known_map  # noqa: E402
from ivln_ce.mapping.projection import official_intrinsics, unproject  # noqa: E402
from ivln_ce.mapping.world_grid import WorldGrid  # noqa: E402

HFOV = math.radians(90)


def frame(depth_m, label, size=64):
    """A synthetic observation: constant-label image, depth in metres (0 = no hit)."""
    d = torch.as_tensor(depth_m, dtype=torch.float32) / 10.0
    return d, torch.full((size, size), label, dtype=torch.uint8)


def integrate(mapper_or_grid, stream, depth, labels, pos, heading):
    grid = mapper_or_grid
    sensor = torch.tensor([pos[0], pos[1] + 1.25, pos[2]], dtype=torch.float32)[None]
    pts, valid = unproject(depth[None], sensor, torch.tensor([heading]), HFOV)
    if not grid.has(stream):
        grid.reset(stream, [pos[0], pos[2]])
    grid.update([stream], pts, labels.reshape(1, -1), valid)
    return render(grid, [stream], sensor, torch.tensor([heading]))


def test_intrinsics_of_the_official_mapper():
    assert official_intrinsics(256, 256, HFOV) == pytest.approx((128.0, 128.0, 128.0, 128.0))


def test_a_wall_at_a_known_distance_lands_on_the_right_row():
    for heading in (0.0, 1.0, -2.5):
        for dist in (1.0, 2.0, 2.87):
            g = WorldGrid()
            depth, labels = frame(torch.full((64, 64), dist), 5)  # a fronto-parallel wall has constant z-depth
            occ, sem = integrate(g, "s", depth, labels, (3.0, 0.0, -2.0), heading)
            rows = torch.nonzero(occ[0].sum(1)).flatten().tolist()
            assert rows == [round((3.2 - dist) / 0.1)], (heading, dist, rows)
            assert set(torch.unique(sem[0][occ[0] == 1]).tolist()) == {5}


def test_objects_ahead_appear_above_the_centre_and_right_appears_right():
    depth = torch.zeros(64, 64)
    depth[30:34, 30:34] = 1.5  # a patch straight ahead
    depth[30:34, 56:60] = 1.5  # a patch to the right
    g = WorldGrid()
    occ, _ = integrate(g, "s", *frame(depth, 3), (0.0, 0.0, 0.0), 0.7)
    cells = torch.nonzero(occ[0]).tolist()
    ahead = [c for c in cells if abs(c[1] - 32) <= 1]
    right = [c for c in cells if c[1] > 33]
    assert ahead and all(r < 32 for r, _ in ahead)
    assert right and all(r < 32 for r, _ in right)
    assert not [c for c in cells if c[1] < 31]


def test_rotation_puts_world_points_where_the_agent_looks():
    g = WorldGrid()
    g.reset("s", [0.0, 0.0])
    pts = torch.tensor([[[-2.0, 1.0, 0.0]]])  # 2 m along -x, at 1 m height
    g.update(["s"], pts, torch.tensor([[8]]), torch.tensor([[True]]))
    sensor = torch.tensor([[0.0, 1.25, 0.0]])
    occ, sem = render(g, ["s"], sensor, torch.tensor([math.pi / 2]))  # heading 90 deg faces -x
    assert torch.nonzero(occ[0]).tolist() == [[12, 32]] and sem[0, 12, 32] == 8
    occ, _ = render(g, ["s"], sensor, torch.tensor([0.0]))  # facing -z: the point is on the left
    assert torch.nonzero(occ[0]).tolist() == [[32, 12]]


def test_keep_highest_picks_the_top_label_with_deterministic_ties():
    g = WorldGrid()
    g.reset("s", [0.0, 0.0])
    pts = torch.tensor([[[0.01, 0.5, 0.01], [0.02, 1.2, 0.02], [0.03, 0.9, 0.03]]])
    g.update(["s"], pts, torch.tensor([[1, 4, 7]]), torch.ones(1, 3, dtype=torch.bool))
    xyz, lab = g.points("s")
    assert lab.tolist() == [4] and xyz[0, 1].item() == pytest.approx(1.2)
    # equal heights later: the larger (x, z, label) wins, independent of order
    g.update(["s"], torch.tensor([[[0.015, 1.2, 0.04], [0.04, 1.2, 0.0]]]), torch.tensor([[9, 2]]), torch.ones(1, 2, dtype=torch.bool))
    xyz, lab = g.points("s")
    assert lab.tolist() == [2] and xyz[0, 0].item() == pytest.approx(0.04)


def test_world_grid_agrees_with_a_slow_whole_cloud_reference():
    rng = np.random.default_rng(0)
    g = WorldGrid(extent=8.0, cell=0.05)
    g.reset("a", [0.0, 0.0])
    g.reset("b", [1.0, 1.0])
    cloud = {"a": [], "b": []}
    for _ in range(5):
        for s in ("a", "b"):
            pts = rng.uniform(-3, 3, size=(400, 3)).astype(np.float32)
            pts[:, 1] = np.round(rng.uniform(0, 2, size=400), 1)  # many equal heights: ties matter
            labels = rng.integers(0, 13, size=400)
            cloud[s].append((pts, labels))
            g.update([s], torch.from_numpy(pts)[None], torch.from_numpy(labels)[None], torch.ones(1, 400, dtype=torch.bool))
    for s, origin in (("a", (0.0, 0.0)), ("b", (1.0, 1.0))):
        best = {}
        ox, oz = origin[0] - 4.0, origin[1] - 4.0
        for pts, labels in cloud[s]:
            for p, l in zip(pts, labels):
                key = (math.floor((p[0] - ox) / 0.05), math.floor((p[2] - oz) / 0.05))
                if not (0 <= key[0] < 160 and 0 <= key[1] < 160):
                    continue
                cand = (float(p[1]), float(p[0]), float(p[2]), int(l))
                if key not in best or cand > best[key]:
                    best[key] = cand
        xyz, lab = g.points(s)
        got = sorted((float(y), float(x), float(z), int(l)) for (x, y, z), l in zip(xyz.tolist(), lab.tolist()))
        assert got == sorted(best.values())


def test_episodic_and_iterative_resets_follow_the_signals():
    near, far = torch.zeros(64, 64), torch.zeros(64, 64)
    near[:, :32] = 1.0  # left half: something 1 m ahead
    far[:, 32:] = 2.0  # right half: 2 m ahead
    obs = lambda d: {"depth": (d / 10.0)[None, ..., None], "position": torch.zeros(1, 3), "heading": torch.zeros(1), "semantic12": torch.full((1, 64, 64), 3, dtype=torch.uint8)}
    no, yes = torch.tensor([False]), torch.tensor([True])
    for mode, expect_both in (("episodic", False), ("iterative", True)):
        m = Mapper(load_config(None, [f"mapping.mode={mode}"]).mapping)
        m(["s"], obs(near), yes, yes)
        out = m(["s"], obs(far), yes, no)  # a new episode (agent mask 0) within the tour
        occupied_rows = set(torch.nonzero(out["occupancy_map"][0].sum(1)).flatten().tolist())
        assert (22 in occupied_rows) == expect_both and 12 in occupied_rows
        out = m(["s"], obs(far), no, yes)  # a new tour clears both modes
        assert set(torch.nonzero(out["occupancy_map"][0].sum(1)).flatten().tolist()) == {12}
        assert out["map"].shape == (1, 14, 64, 64)


def test_known_map_equals_the_exhaustive_visit_and_is_read_once(tmp_path):
    from ivln_ce.scenes.mesh import generated_scene
    from ivln_ce.sim.embedded import EmbeddedSimulator

    cfg = load_config(None, ["simulator.sensors=[depth,semantic]", "simulator.renderer=auto"] + [f"simulator.{n}.{d}=48" for n in ("depth", "semantic") for d in ("width", "height")])
    sim = EmbeddedSimulator(cfg.simulator)
    sim.load_scene_object(generated_scene(3))
    known = KnownMaps(tmp_path, "gt_semantics")
    build_known_map(sim, "house3", known, spacing=3.0, turns=6)
    xyz, sem = known.get("house3")
    assert len(xyz) > 500 and set(sem.unique().tolist()) - {0}
    # the same visit integrated online gives the same memory: rebuild and compare point sets
    again = KnownMaps(tmp_path / "again", "gt_semantics")
    build_known_map(sim, "house3", again, spacing=3.0, turns=6)
    x2, s2 = again.get("house3")
    assert torch.equal(torch.sort(xyz[:, 1]).values, torch.sort(x2[:, 1]).values) and torch.equal(torch.sort(sem).values, torch.sort(s2).values)
    # known mode loads it at tour starts, from the in-memory cache
    m = Mapper(load_config(None, ["mapping.mode=known"]).mapping, known_maps=known)
    p = sim.sample_navigable_point(np.random.default_rng(0))
    obs = {"position": torch.tensor(p, dtype=torch.float32)[None], "heading": torch.zeros(1), "depth": torch.zeros(1, 48, 48, 1)}
    a = m(["s"], obs, torch.tensor([True]), torch.tensor([True]), scans=["house3"])
    b = m(["s"], obs, torch.tensor([True]), torch.tensor([True]), scans=["house3"])
    assert known.reads == 1 and torch.equal(a["occupancy_map"], b["occupancy_map"]) and a["occupancy_map"].sum() > 50
    # the loaded map renders exactly like the visit memory it was saved from
    g = WorldGrid()
    g.load_points("v", xyz, sem)
    sensor = torch.tensor(p + np.array([0, 1.25, 0]), dtype=torch.float32)[None]
    occ, s = render(g, ["v"], sensor, torch.zeros(1))
    assert torch.equal(occ, a["occupancy_map"]) and torch.equal(s, a["semantic_map"])


def test_streams_are_independent_and_keyed_by_id():
    g = WorldGrid()
    depth, labels = frame(torch.full((64, 64), 1.0), 2)
    occ_a, _ = integrate(g, "a", depth, labels, (0.0, 0.0, 0.0), 0.0)
    occ_b, _ = integrate(g, "b", *frame(torch.zeros(64, 64), 2), (0.0, 0.0, 0.0), 0.0)
    assert occ_a.sum() > 0 and occ_b.sum() == 0
    occ_ba = render(g, ["b", "a"], torch.tensor([[0.0, 1.25, 0.0]] * 2), torch.zeros(2))[0]
    assert torch.equal(occ_ba[1], occ_a[0]) and occ_ba[0].sum() == 0
    g.drop("a")
    assert not g.has("a") and g.has("b")
