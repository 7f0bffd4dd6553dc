"""Policy evaluation on a CUDA device: the policy (and MAP-CMA's mapper) batched in the main
process on ``cuda`` takes the same actions, so writes the same per-episode metrics and path
logs, as on the CPU (``eval.policy_process=main`` on both, so only the device differs).
Untrained policies (seeded initialisation) make every action depend on the network's output."""

import pytest

torch = pytest.importorskip("torch", reason="policies need torch")

from ivln_ce.evaluation.evaluator import evaluate  # noqa: E402
from tests.rollout.test_policy_eval import MAP, TOUR, cfg, outputs  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: torch.cuda.is_available() is False")]


@pytest.mark.parametrize("policy", [MAP, TOUR], ids=["map_cma", "tour_cma"])
def test_policy_in_the_main_process_on_cuda_acts_as_on_the_cpu(tiny_benchmark, tmp_path, policy, cuda_exact):
    runs, summaries = {}, {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        # short episodes and oracle walks (as in test_policy_eval): every kind of step passes the policy
        summary = evaluate(cfg(tiny_benchmark, out, *policy, "eval.tours=[0,1,2,3]", "eval.num_envs=2",
                               "eval.policy_process=main", f"eval.device={device}", "env.oracle_step_limit=12",
                               "env.max_agent_steps=12"), show_progress=False)
        assert summary["config"]["eval"]["device"] == device
        runs[device], summaries[device] = outputs(out, summary["label"]), summary
    assert runs["cuda"]["dtw_data"] == runs["cpu"]["dtw_data"]  # the same actions, step by step
    assert runs["cuda"]["iterative_all_stats"] == runs["cpu"]["iterative_all_stats"]
    for key in ("success", "spl", "ndtw", "path_length", "tndtw_paper", "agent_steps"):
        assert summaries["cuda"][key] == summaries["cpu"][key], key
    # the policy really decided: not every episode ends at its first step
    assert summaries["cpu"]["agent_steps"] > summaries["cpu"]["num_episodes"]
