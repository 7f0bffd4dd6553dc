"""The embedded renderer on the NVIDIA GPU (EGL device of ``simulator.gpu_device_id=0``)
against the CPU paths: Embree ray casting in this process and Mesa's llvmpipe (what a CPU
machine rasterises with) in a subprocess that loads only Mesa's EGL vendor library. The same
poses give the same frames within the tolerances of ``test_render`` (silhouette pixels aside).
Skipped without CUDA, or with the reason when EGL device 0 is not the NVIDIA driver."""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch says whether a CUDA device is present")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.scenes.mesh import load_scene  # noqa: E402
from ivln_ce.sim.navigation import grid_for_layout  # noqa: E402
from ivln_ce.sim.render import CameraSpec, EmbreeRenderer  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: torch.cuda.is_available() is False")]

SIZE = 128


def _poses(scene, n=10):
    nav = grid_for_layout(scene.layout)
    rng = np.random.default_rng(0)
    return [(nav.sample_point(rng) + np.array([0, 1.25, 0]), float(rng.uniform(-math.pi, math.pi))) for _ in range(n)]


@pytest.fixture(scope="module")
def nvidia(scene_file):
    """The embedded simulator's renderer with simulator.gpu_device_id=0, and its GL renderer name."""
    from ivln_ce.sim.embedded import EmbeddedSimulator

    cfg = load_config(None, ["simulator.renderer=moderngl", "simulator.gpu_device_id=0", "simulator.sensors=[rgb,depth,semantic]"])
    sim = EmbeddedSimulator(cfg.simulator)
    sim.load_scene(str(scene_file))
    try:
        renderer = sim.renderer
    except Exception as exc:  # pragma: no cover - machine dependent
        pytest.skip(f"no EGL context on EGL device 0: {exc}")
    info = renderer.ctx.info
    name = f"{info['GL_VENDOR']} / {info['GL_RENDERER']}"
    if "nvidia" not in name.lower():
        pytest.skip(f"EGL device 0 is {name!r}, not the NVIDIA driver's: its EGL library (libEGL_nvidia) is not installed "
                    "(in a container: NVIDIA_DRIVER_CAPABILITIES must include graphics)")
    yield sim, renderer, name
    sim.close()


def _frames(renderer, poses):
    cam = CameraSpec(SIZE, SIZE, math.radians(90))
    return [renderer.render(p, h, cam) for p, h in poses]


def _assert_agree(a, b):
    """test_render's tolerances: only silhouette pixels may differ."""
    depth_agree = label_agree = pixels = 0
    for x, y in zip(a, b):
        assert np.mean((x.depth > 0) != (y.depth > 0)) < 0.01
        err = np.abs(x.depth - y.depth)
        depth_agree += int(np.sum(err < 1e-3))
        label_agree += int(np.sum(x.instance == y.instance))
        pixels += x.instance.size
        assert np.median(err) < 1e-4
        assert np.mean(np.abs(x.rgb.astype(int) - y.rgb.astype(int))) < 2.0
    assert depth_agree / pixels >= 0.99, depth_agree / pixels
    assert label_agree / pixels >= 0.99, label_agree / pixels


def test_nvidia_egl_frames_equal_the_ray_caster(nvidia, scene_file):
    sim, renderer, _ = nvidia
    scene = load_scene(scene_file)
    poses = _poses(scene)
    gpu = _frames(renderer, poses)
    assert sum(int((f.depth > 0).sum()) for f in gpu) > 0.5 * len(gpu) * SIZE * SIZE  # inside a house: mostly hits
    _assert_agree(gpu, _frames(EmbreeRenderer(scene.mesh), poses))


_LLVMPIPE = """
import json, math, sys
import numpy as np
from ivln_ce.scenes.mesh import load_scene
from ivln_ce.sim.render import CameraSpec, ModernGLRenderer
scene = load_scene(sys.argv[1])
poses = json.loads(sys.argv[2])
r = ModernGLRenderer(scene.mesh)
cam = CameraSpec({size}, {size}, math.radians(90))
out = [r.render(np.array(p), h, cam) for p, h in poses]
np.savez(sys.argv[3], name=r.ctx.info["GL_RENDERER"], rgb=np.stack([o.rgb for o in out]),
         depth=np.stack([o.depth for o in out]), instance=np.stack([o.instance for o in out]))
"""


def _mesa_vendor_file() -> Path | None:
    for d in ("/usr/share/glvnd/egl_vendor.d", "/etc/glvnd/egl_vendor.d"):
        found = sorted(Path(d).glob("*mesa*.json")) if Path(d).is_dir() else []
        if found:
            return found[0]
    return None


def test_nvidia_egl_frames_equal_llvmpipe(nvidia, scene_file, tmp_path):
    vendor = _mesa_vendor_file()
    if vendor is None:
        pytest.skip("Mesa's EGL vendor file (glvnd egl_vendor.d/*mesa*.json) is not installed: no llvmpipe to compare with")
    sim, renderer, _ = nvidia
    scene = load_scene(scene_file)
    poses = _poses(scene)
    env = dict(os.environ, __EGL_VENDOR_LIBRARY_FILENAMES=str(vendor), LIBGL_ALWAYS_SOFTWARE="1", CUDA_VISIBLE_DEVICES="")
    out = tmp_path / "llvmpipe.npz"
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(_LLVMPIPE.format(size=SIZE)), str(scene_file),
                          json.dumps([(p.tolist(), h) for p, h in poses]), str(out)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    cpu = np.load(out)
    if "llvmpipe" not in str(cpu["name"]):
        pytest.skip(f"the Mesa-only subprocess rendered with {cpu['name']!r}, not llvmpipe")

    class Frame:
        def __init__(self, i):
            self.rgb, self.depth, self.instance = cpu["rgb"][i], cpu["depth"][i], cpu["instance"][i]

    _assert_agree(_frames(renderer, poses), [Frame(i) for i in range(len(poses))])
