"""Mesa's llvmpipe and triton's LLVM in one process (the fresh-machine crash).

Each case runs in a subprocess, because the failure mode is a segmentation fault. The control
case shows the clash is real on this machine (an unguarded context followed by triton
crashes); the guarded cases show that the project's renderer and entry points survive triton
being imported after they rendered, as ``torch.optim`` and ``torch.compile`` do.
"""

import importlib.util
import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="triton is not installed (CI installs it beside the CPU torch; `pip install triton`)",
)


def _run(code: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=timeout)


def _renderer_name() -> str:
    probe = _run("""
        import moderngl
        print(moderngl.create_standalone_context(backend="egl").info["GL_RENDERER"])
    """)
    if probe.returncode != 0:
        pytest.skip(f"no EGL context on this machine: {probe.stderr.strip()[-200:]}")
    return probe.stdout.strip()


def test_unguarded_order_crashes_with_llvmpipe():
    """The control: without the guard, triton after llvmpipe is a segmentation fault."""
    name = _renderer_name()
    if "llvmpipe" not in name:
        pytest.skip(f"the EGL renderer here is {name!r}, not Mesa's llvmpipe: no second LLVM to clash with")
    crash = _run("""
        import moderngl
        moderngl.create_standalone_context(backend="egl")
        import triton
        print("survived")
    """)
    assert crash.returncode == -signal.SIGSEGV, (crash.returncode, crash.stdout, crash.stderr[-500:])


def test_renderer_then_triton_then_torch_optimizer(scene_file):
    ok = _run("""
        import sys
        from ivln_ce.config import load_config
        from ivln_ce.sim.embedded import EmbeddedSimulator
        cfg = load_config(None, ["simulator.renderer=moderngl", "simulator.sensors=[rgb,depth]"]).simulator
        sim = EmbeddedSimulator(cfg)
        sim.load_scene(sys.argv[1])
        depth = float(sim.get_observations().depth.mean())
        import triton  # after Mesa's LLVM is loaded
        import torch
        p = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.Adam([p], lr=0.1)  # imports torch._dynamo, which imports triton
        (p ** 2).sum().backward()
        opt.step()
        print("survived", depth, float(p.sum()))
    """, str(scene_file))
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert ok.stdout.startswith("survived") and float(ok.stdout.split()[1]) > 0


@pytest.mark.slow
def test_train_rednet_entry_point_survives(tmp_path):
    """`ivln-ce train-rednet` renders frames, then builds Adam: the command that crashed."""
    out = tmp_path / "rednet"
    run = _run("""
        import sys
        from ivln_ce.cli import main
        sys.exit(main(sys.argv[1:]))
    """, "train-rednet", "--out", str(out), "--preset", "tiny", "--size", "32", "--frames-per-house", "2",
        "--epochs", "1", "--batch-size", "2", "--encoder-depth", "18", "--max-train-houses", "1", "--max-eval-houses", "1")
    assert run.returncode == 0, run.stderr[-2000:]
    assert (out / "checkpoint.pt").exists() and (out / "report.json").exists()
