"""Episode videos: real H.264 / VP9 files with the composed panels, atomic writes, clear errors."""

import numpy as np
import pytest

from ivln_ce.scenes.layout import generate_house
from ivln_ce.viz.video import EpisodeVideo, TopdownTrail

imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg encodes the videos")


def read_video(path):
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    w, h = meta["size"]
    frames = [np.frombuffer(f, np.uint8).reshape(h, w, 3) for f in reader]
    return meta, frames


def panels(k):
    rgb = np.zeros((120, 160, 3), np.uint8)
    rgb[..., 0] = 220  # red
    depth = np.full((60, 80, 1), 0.5, np.float32)
    ego = np.zeros((64, 64, 3), np.uint8)
    ego[..., 1] = 200  # green
    top = np.full((90, 90, 3), 10 * k, np.uint8)  # brightens over time
    return rgb, depth, ego, top


@pytest.mark.parametrize("suffix,codec", [(".mp4", "h264"), (".webm", "vp9")])
def test_video_has_the_panels_in_a_browser_codec(tmp_path, suffix, codec):
    path = tmp_path / "tour" / f"ep{suffix}"
    video = EpisodeVideo(path, fps=8, tile=96)
    for k in range(12):
        video.add(*panels(k))
    assert not path.exists()  # written to a temporary name until close
    assert video.close() == path
    meta, frames = read_video(path)
    assert meta["codec"].startswith(codec) and len(frames) == 12 == video.frames
    w, h = meta["size"]
    assert w % 2 == 0 and h % 2 == 0
    expected = video.compose(*panels(11))
    assert frames[-1].shape == expected.shape
    # panel order: RGB (red), depth, egocentric map (green), top-down (grey ramp)
    top = 18
    assert frames[-1][top + 48, 60].astype(int)[0] > 170 and frames[-1][top + 48, 60].astype(int)[1] < 80
    x_ego = 128 + 4 + 128 + 4 + 48
    assert frames[-1][top + 48, x_ego].astype(int)[1] > 150
    x_top = w - 40
    assert frames[0][top + 48, x_top].mean() < frames[-1][top + 48, x_top].mean() - 60
    assert np.abs(frames[-1].astype(int) - expected.astype(int)).mean() < 6  # lossy, but close
    assert not list(path.parent.glob(".*tmp*"))


def test_missing_panels_are_blank_new_panels_are_an_error(tmp_path):
    rgb, depth, ego, top = panels(0)
    with EpisodeVideo(tmp_path / "a.mp4", tile=64, captions=False) as video:
        video.add(rgb, depth)
        frame = video.compose(rgb)  # depth left out: a blank tile, same size
        assert frame.shape == video.compose(rgb, depth).shape
        assert (frame[:, 90:120] == 200).all()
        with pytest.raises(ValueError, match="not in the first frame"):
            video.add(rgb, depth, ego)
    assert (tmp_path / "a.mp4").exists()


def test_errors_and_abort_leave_no_file(tmp_path):
    with pytest.raises(ValueError, match="must end in"):
        EpisodeVideo(tmp_path / "x.avi")
    with pytest.raises(ValueError, match="at least one panel"):
        EpisodeVideo(tmp_path / "x.mp4").add()
    with pytest.raises(ValueError, match="no frame"):
        EpisodeVideo(tmp_path / "x.mp4").close()
    with pytest.raises(RuntimeError):
        with EpisodeVideo(tmp_path / "y.mp4") as video:
            video.add(np.zeros((32, 32, 3), np.uint8))
            raise RuntimeError("episode failed")
    assert list(tmp_path.iterdir()) == []


def test_topdown_trail_draws_the_path_so_far():
    layout = generate_house(3)
    (x0, z0), (x1, z1) = layout.bounds
    start = np.array([x0 + 1.0, 0.0, z0 + 1.0])
    trail = TopdownTrail(layout, reference=[start, start + [2.0, 0, 0]], goal=start + [2.0, 0, 0])
    a = trail([start], heading=0.0)
    b = trail([start, start + [0, 0, 1.0], start + [1.0, 0, 1.0]], heading=1.0)
    assert a.shape == b.shape == trail.base.shape and a.dtype == np.uint8
    changed = np.any(a != b, axis=2)
    assert changed.sum() > 100
    ys, xs = np.nonzero(changed)
    cx, cz = trail.frame(start[0] + 0.5, start[2] + 1.0)  # on the drawn path
    assert np.min(np.hypot(xs - cx, ys - cz)) < 3
