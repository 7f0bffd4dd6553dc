"""What ``reproduce --scale default`` would run, checked without running it: the R2R-sized
`default` benchmark, MAP-CMA teacher-forced on EnvDrop and fine-tuned by DAgger from that
checkpoint (SPEC §9.7), the latent models on `train`; every stage's overrides a valid config."""

from pathlib import Path

import pytest

from ivln_ce.config import load_config
from ivln_ce.reproduce.pipeline import _data_dir, base_overrides, train_stages
from ivln_ce.reproduce.plan import SCALES, runs_for


def _as_dict(overrides):
    return dict(o.split("=", 1) for o in overrides)


def test_default_scale_uses_the_default_benchmark():
    scale = SCALES["default"]
    assert scale.preset == "default" and _data_dir(scale, None) == Path("data/synthetic_default")
    assert _data_dir(SCALES["small"], None) == Path("data/synthetic_small")  # the smaller scales keep theirs


def test_default_scale_teacher_forces_map_cma_on_envdrop_then_fine_tunes_by_dagger(tmp_path):
    scale = SCALES["default"]
    out = tmp_path / "out"
    map_runs = [r for r in runs_for("all") if r.table == "table4"]
    assert len(map_runs) == 6
    for run in map_runs:
        tf, ft = train_stages(out, scale, run, seed=1)
        t, f = _as_dict(tf.overrides), _as_dict(ft.overrides)
        assert (t["train.split"], t["train.p"], t["train.iterations"], t["train.epochs"]) == ("envdrop", "1.0", "1", "20")
        assert (f["train.split"], f["train.p"], f["train.iterations"], f["train.update_size"], f["train.epochs"]) == \
            ("train", "0.5", "10", "3300", "4")
        assert tf.folder == out / "runs" / run.key / "seed1" / "train_tf" == Path(t["train.out_dir"])
        assert ft.folder == out / "runs" / run.key / "seed1" / "train" == Path(f["train.out_dir"])
        assert ft.warm_from == tf.name and tf.warm_from is None
        assert "train.store_cache" in t and "train.store_cache" not in f  # only teacher forcing is shared by seeds
        # each stage is a valid config with the run's own recipe (iterative maps: tours in both stages)
        data = Path("data/synthetic_default")
        for stage in (tf, ft):
            warm = ["policy.checkpoint=/nonexistent/ckpt.19.pth"] if stage.warm_from else []
            cfg = load_config(None, base_overrides(out, data, scale, run, 1, "cpu") + list(stage.overrides) + warm)
            assert cfg.policy.name.value == "map_cma" and cfg.data.root == str(data)
            assert bool(cfg.train.use_tours) == (run.train_mode == "iterative")
            assert cfg.train.itmaps_ft_on_tours is True  # the fixed recipe: fine-tuning on train tours (not P6)


@pytest.mark.parametrize("scale_name", ["tiny", "small", "quick"])
def test_smaller_scales_keep_one_teacher_forcing_stage_on_train(tmp_path, scale_name):
    for run in runs_for("all"):
        (only,) = train_stages(tmp_path, SCALES[scale_name], run, seed=0)
        o = _as_dict(only.overrides)
        assert o["train.split"] == "train" and o["train.p"] == "1.0" and only.folder.name == "train"


def test_latent_models_are_not_fine_tuned_at_the_default_scale(tmp_path):
    for run in runs_for("table3"):
        (only,) = train_stages(tmp_path, SCALES["default"], run, seed=0)
        assert _as_dict(only.overrides)["train.split"] == "train" and only.warm_from is None


def test_the_gate_evaluates_each_model_in_its_own_mode_without_instructions(tmp_path):
    from ivln_ce.config import load_config
    from ivln_ce.reproduce.pipeline import base_overrides, gate_eval_overrides
    from ivln_ce.reproduce.plan import SCALES, runs_for

    scale = SCALES["tiny"]
    runs = {r.key: r for r in runs_for("all")}
    for key, mode in (("cma", None), ("tour_cma", None), ("map_cma_gt_episodic", "episodic"), ("map_cma_rednet_known", "known")):
        run = runs[key]
        over = gate_eval_overrides(tmp_path, scale, run, 1, tmp_path / "ckpt.3.pth", ["t1"])
        cfg = load_config(None, base_overrides(tmp_path, tmp_path / "data", scale, run, 1, "cpu") + over)
        assert (cfg.eval.split, cfg.eval.instruction, cfg.eval.label) == ("val_unseen", "none", "final-instruction_none")
        folder = "val_unseen_-_noinstruction" if mode is None else f"val_unseen_{mode}_noinstruction"
        assert cfg.results_dir == str(tmp_path / "runs" / key / "seed1" / "eval" / folder)
        assert cfg.policy.checkpoint == str(tmp_path / "ckpt.3.pth") and list(cfg.eval.tours) == ["t1"]
        if mode is not None:
            assert cfg.mapping.mode.value == mode
