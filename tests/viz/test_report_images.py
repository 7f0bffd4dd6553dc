"""The report's map images: palette PNGs decode to the intended colours; memory drawn highest on top."""

import cv2
import numpy as np

from ivln_ce.scenes.categories import CLASS_COLORS
from ivln_ce.viz.maps import VOID_OCCUPIED
from ivln_ce.viz.records import read_map_record
from ivln_ce.viz.report.images import (
    AGENT_PATH,
    GOAL,
    OCCUPIED,
    PALETTE,
    REFERENCE,
    WHITE,
    ImageSettings,
    allocentric_index,
    egocentric_index,
    map_record_images,
    write_indexed_png,
)


def decode(path):
    return cv2.imread(str(path), cv2.IMREAD_COLOR)[:, :, ::-1]


def test_indexed_png_decodes_to_the_palette_colours(tmp_path):
    rng = np.random.default_rng(0)
    index = rng.integers(0, len(PALETTE), (37, 53)).astype(np.uint8)
    for level in (1, 6):
        write_indexed_png(tmp_path / "x.png", index, level=level)
        np.testing.assert_array_equal(decode(tmp_path / "x.png"), PALETTE[index])
    assert tuple(PALETTE[OCCUPIED]) == VOID_OCCUPIED and tuple(PALETTE[WHITE]) == (255, 255, 255)
    assert [tuple(c) for c in PALETTE[: len(CLASS_COLORS)]] == [tuple(c) for c in CLASS_COLORS]


def test_egocentric_map_colours_and_agent_arrow():
    occ = np.zeros((64, 64), np.uint8)
    sem = np.zeros((64, 64), np.uint8)
    occ[10, 20] = 1
    sem[40, 5] = 7
    img = egocentric_index(occ, sem, scale=3)
    assert img.shape == (192, 192)
    assert (img[30:33, 60:63] == OCCUPIED).all() and (img[120:123, 15:18] == 7).all()
    assert img[0, 0] == WHITE and (img[86:106, 96] == GOAL).any()  # the arrow at the centre


def test_allocentric_memory_draws_the_highest_point_of_a_pixel_on_top():
    s = ImageSettings(allo_px_per_m=10.0, allo_max_side=400)
    # two labels in one 10 cm pixel: the higher one (label 3, y=1.2) must show, whatever the order
    xyz = np.array([[0.0, 1.2, 0.0], [0.02, 0.3, 0.02], [2.0, 0.0, 2.0]], np.float32)
    for perm in ([0, 1, 2], [1, 0, 2]):
        img = allocentric_index(xyz[perm], np.array([3, 5, 0], np.uint8)[perm], {}, None, s)
        assert img[5, 5] == 3  # (0 - (-0.5)) * 10 = 5: both points fall in pixel 5
        assert img[25, 25] == OCCUPIED  # void label: an occupied cell of no class
    paths = {"agent": np.array([[0, 0, 0], [2.0, 0, 0]]), "reference": np.array([[0, 0, 2.0], [2.0, 0, 2.0]])}
    img = allocentric_index(xyz, np.array([3, 5, 0], np.uint8), paths, np.array([1.0, 0, 1.0]), s)
    assert (img == AGENT_PATH).sum() > 20 and (img == REFERENCE).sum() > 20 and (img == GOAL).sum() > 10


def test_map_record_without_egocentric_maps(tmp_path):
    np.savez_compressed(tmp_path / "e.npz", xyz=np.zeros((0, 3), np.float32), labels=np.zeros(0, np.uint8),
                        path_agent=np.array([[0, 0, 0], [1.0, 0, 0]]))
    rec = read_map_record(tmp_path / "e.npz", tmp_path)
    ego, allo = map_record_images(rec, tmp_path / "ego.png", tmp_path / "allo.png", ImageSettings())
    assert (ego, allo) == (False, True) and not (tmp_path / "ego.png").exists()
    assert decode(tmp_path / "allo.png").shape[0] > 10
