"""eval.instruction (seed 000 §5) through ``ivln-ce eval``: the policy's instruction encoder gets
exactly the ablated token ids, the setting is recorded and marked analysis-only, and it is part of
the fingerprint, so a resumed evaluation never reuses tours of another setting."""

import json

import pytest

torch = pytest.importorskip("torch", reason="policies need torch")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.data.episodes import load_episodes  # noqa: E402
from ivln_ce.data.language_ablation import InstructionAblation, ablate_instructions  # noqa: E402
from ivln_ce.evaluation.evaluator import EvalPaths, evaluate, load_split, run_fingerprint  # noqa: E402

SMALL = ["policy.name=map_cma", "simulator.sensors=[depth,semantic]", "policy.depth_backbone=small",
         *[f"simulator.{s}.{d}=32" for s in ("depth", "semantic") for d in ("width", "height")]]
SHORT = ["eval.tours=[0]", "env.max_agent_steps=3", "env.oracle_step_limit=3", "eval.policy_process=main"]


def cfg(data, out, *extra):
    return load_config(None, [f"data.root={data}", "data.split=val_unseen", f"results_dir={out}", *extra])


# one setting in the fast suite: the path from eval.instruction to the encoder is the same for all
# (each setting's token lists are checked by hand in tests/data/test_language_ablation.py)
@pytest.mark.parametrize("setting", ["last:3", pytest.param("none", marks=pytest.mark.slow), pytest.param("other", marks=pytest.mark.slow)])
def test_the_instruction_encoder_receives_exactly_the_ablated_ids(tiny_benchmark, tmp_path, setting):
    from ivln_ce.rollout.policy_agent import PolicyAgent

    c = cfg(tiny_benchmark, tmp_path, "eval.agent=policy", *SMALL, *SHORT, f"eval.instruction={setting}", "eval.instruction_seed=3")
    split = load_split(c)
    agent = PolicyAgent.from_config(c, split.vocab_size)
    seen = []
    agent.policy.net.instruction_encoder.register_forward_pre_hook(lambda mod, args: seen.extend(map(tuple, args[0].tolist())))
    summary = evaluate(c, show_progress=False, policy_agent=agent)
    # expected: the file's episodes of tour 0, ablated by hand from the file (not by the evaluator's copy)
    ds = load_episodes(tiny_benchmark / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen.json.gz")
    tour0 = json.loads((tiny_benchmark / "tours.json").read_text())["val_unseen"]
    first_scan = next(iter(tour0.values()))
    ids = [str(e) for e in first_scan[0]]
    ablated = ablate_instructions(ds, InstructionAblation.parse(setting), seed=3).dataset
    expected = {tuple(ablated[i].instruction_tokens) for i in ids}
    assert set(seen) == expected and summary["num_episodes"] == len(ids)
    original = {tuple(ds[i].instruction_tokens) for i in ids}
    assert not expected & original  # every episode's ids really changed
    if setting == "last:3":
        assert all(sum(1 for t in row if t) == 3 for row in expected)
    elif setting == "none":
        assert expected == {(0,) * len(ds.episodes[0].instruction_tokens)}
    else:
        assert expected <= {tuple(e.instruction_tokens) for e in ds}  # real instructions of the split
    # recorded, labelled and analysis-only
    label = summary["label"]
    assert label == f"map_cma-instruction_{setting.replace(':', '')}" and summary["instruction"] == setting
    assert not summary["leaderboard_valid"]
    manifest = json.loads(EvalPaths(tmp_path, "val_unseen", label).output("manifest").read_text())
    assert manifest["instruction"] == {"setting": setting, "seed": 3, "episodes_changed": len(ds), "analysis_only": True}
    assert f"language ablation (eval.instruction={setting})" in manifest["analysis_only_because"]


def test_the_setting_is_in_the_fingerprint_and_a_resume_recomputes(tiny_benchmark, tmp_path):
    base = ["eval.agent=stop", "simulator.sensors=[]", "eval.tours=[0]", "env.oracle_step_limit=12", "eval.label=same"]
    fps = {}
    for setting, seed in (("full", 0), ("full", 5), ("none", 0), ("last:5", 0), ("other", 0), ("other", 5)):
        c = cfg(tiny_benchmark, tmp_path, *base, f"eval.instruction={setting}", f"eval.instruction_seed={seed}")
        fps[setting, seed] = run_fingerprint(c, load_split(c)).core
    assert fps["full", 0] == fps["full", 5]  # the seed draws nothing without `other`
    assert len({fps[k] for k in fps if k != ("full", 5)}) == 5
    first = evaluate(cfg(tiny_benchmark, tmp_path, *base), show_progress=False)
    again = evaluate(cfg(tiny_benchmark, tmp_path, *base), show_progress=False)
    other = evaluate(cfg(tiny_benchmark, tmp_path, *base, "eval.instruction=none"), show_progress=False)
    assert first["resume"]["computed"] == 1 and again["resume"] == {"reused": 1, "computed": 0, "stale": 0}
    assert other["resume"] == {"reused": 0, "computed": 1, "stale": 1} and other["instruction"] == "none"
    assert first["leaderboard_valid"] is False and "language ablation" not in " ".join(first["notes"])
