"""Pictures a reader understands alone: labels that neither overlap nor leave the image, one
colour meaning per role, step-limit episodes flagged, titled figures."""

import colorsys

import numpy as np
import pytest

from ivln_ce.viz.report.builder import _step_limit, at_step_limit
from ivln_ce.viz.report.svg import EPISODE_HUES, bar_chart_svg, episode_color
from ivln_ce.viz.scenes import place_labels, titled


def test_labels_never_overlap_and_stay_inside_the_image():
    rng = np.random.default_rng(0)
    img = np.full((200, 300, 3), 255, np.uint8)
    words = ["chest of drawers", "sink", "counter", "cabinet", "plant", "sofa", "cushion", "shelving"]
    labels = [(words[k % len(words)], (int(x), int(y))) for k, (x, y) in enumerate(rng.uniform([-20, -20], [320, 220], (60, 2)))]
    boxes = place_labels(img, labels)
    assert 8 <= len(boxes) < 60  # crowded: some fit, the rest are left out rather than drawn over others
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        assert 0 <= x0 < x1 <= 300 and 0 <= y0 < y1 <= 200
        for bx0, by0, bx1, by1 in boxes[i + 1:]:
            assert x1 < bx0 or x0 > bx1 or y1 < by0 or y0 > by1
    # a label anchored on the right edge is moved in, not cut
    edge = np.full((60, 120, 3), 255, np.uint8)
    (x0, _, x1, _), = place_labels(edge, [("chest of drawers", (118, 30))])
    assert x1 <= 120 and x0 >= 0


def test_episode_colours_stay_out_of_the_role_colours():
    """Blue is the agent and green the target path in the DTW panel, red the goals: no episode
    colour falls in those hues, and neighbouring episodes differ."""
    hues = []
    for k in range(40):
        c = episode_color(k)
        r, g, b = (int(c[i:i + 2], 16) / 255 for i in (1, 3, 5))
        h = colorsys.rgb_to_hls(r, g, b)[0]
        assert any(a - 1e-3 <= h <= b_ + 1e-3 for a, b_ in EPISODE_HUES), (k, c, h)
        hues.append(h)
    assert all(episode_color(k) != episode_color(k + 1) for k in range(39))


def test_step_limit_episodes_are_flagged():
    assert _step_limit({"env": {"max_agent_steps": 200}}) == 200
    assert _step_limit({"env": {"max_agent_steps": True}}) is None and _step_limit({}) is None and _step_limit([]) is None
    assert at_step_limit({"steps_taken": 200}, 200) and not at_step_limit({"steps_taken": 199}, 200)
    assert not at_step_limit({"steps_taken": 500}, None) and not at_step_limit(None, 200)


def test_the_per_tour_chart_is_readable_for_few_and_many_tours():
    few = bar_chart_svg("b", [(str(k), 40.0 + k, f"t{k}.html", "") for k in range(3)])
    assert 'width="560"' in few and ">41.0<" in few and "rotate(55)" not in few  # values shown, labels upright
    many = bar_chart_svg("b", [(str(k), 40.0, f"t{k}.html", "") for k in range(60)])
    width = float(many.split('width="')[1].split('"')[0])
    assert width >= 60 * 14 and "rotate(55)" in many


def test_titled_adds_a_band_above():
    img = np.zeros((10, 200, 3), np.uint8)
    out = titled(img, ["a title", "a subtitle"])
    assert out.shape[1] == 200 and out.shape[0] > 30 and (out[-10:] == 0).all()
    assert titled(img, ["", ""]) is img


@pytest.mark.parametrize("limit_hit", [False, True])
def test_the_tour_picture_has_a_title_and_a_complete_legend(tiny_benchmark, limit_hit):
    from ivln_ce.data.episodes import load_episodes
    from ivln_ce.data.targets import iter_target_paths
    from ivln_ce.scenes.mesh import load_scene
    from ivln_ce.viz.tours import tour_image

    targets = dict(iter_target_paths(tiny_benchmark / "gt_ndtw.json", "val_unseen"))
    tid, target = next(iter(targets.items()))
    ds = load_episodes(tiny_benchmark / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen.json.gz")
    scene = load_scene(tiny_benchmark / "scene_datasets" / ds[target.episode_ids[0]].scene_id)
    goals = {e: np.asarray(ds[e].goal_position) for e in target.episode_ids}
    plain = tour_image(scene.layout, target, target, goals)
    img = tour_image(scene.layout, target, target, goals, title="t", subtitle="s",
                     step_limit={target.episode_ids[0]} if limit_hit else None)
    assert img.shape[0] > plain.shape[0]  # the title band
    assert img.shape[1] == plain.shape[1]  # the same plan and key, only the band added
