"""train-compat and score-instructions on the tiny benchmark: resume equality, scoring, CLI errors."""

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ivln_ce.cli import main  # noqa: E402
from ivln_ce.fidelity.compat_features import ViewSettings  # noqa: E402
from ivln_ce.fidelity.compat_score import ScoreRequest, score_instructions  # noqa: E402
from ivln_ce.fidelity.compat_train import CompatTrainConfig, CompatTrainError, train_compat  # noqa: E402

SPLITS = "datasets/R2R_VLNCE_v1-3_preprocessed"
FAST_VIEWS = ViewSettings(spacing=3.0, max_viewpoints=4, views=2, size=32)


@pytest.fixture(scope="module")
def tiny_perturbed(tiny_benchmark, tmp_path_factory) -> Path:
    from ivln_ce.benchmark.perturb import PerturbRequest, build_perturbed

    out = tmp_path_factory.mktemp("compat") / "train_perturbed.json.gz"
    build_perturbed(PerturbRequest(episodes=tiny_benchmark / SPLITS / "train/train.json.gz", out=out,
                                   scenes_dir=tiny_benchmark / "scene_datasets"), show_progress=False)
    return out


def _cfg(tiny_benchmark, perturbed, out, **kw):
    base = dict(episodes=str(tiny_benchmark / SPLITS / "train/train.json.gz"), perturbed=str(perturbed),
                scenes_dir=str(tiny_benchmark / "scene_datasets"), out=str(out), epochs=2, batch_size=8, lr=3e-3,
                views=FAST_VIEWS, hidden_size=32, embedding_size=16, projection_size=32)
    base.update(kw)
    return CompatTrainConfig(**base)


class Stop(Exception):
    pass


def _state(out: Path) -> dict:
    from ivln_ce.models.official_weights import read_checkpoint

    return read_checkpoint(out / "compat.pt")["state_dict"]


@pytest.mark.slow
def test_killed_run_resumes_to_the_uninterrupted_weights(tiny_benchmark, tiny_perturbed, tmp_path):
    a = train_compat(_cfg(tiny_benchmark, tiny_perturbed, tmp_path / "a"), show_progress=False, log=lambda m: None)
    assert a["steps"] == 2 * 6 and (tmp_path / "a/tb").is_dir() and len(a["history"]) == 2

    def stop(step):
        if step == 3:  # one step after the resume point of step 2: the resumed run redoes it
            raise Stop

    cfg = _cfg(tiny_benchmark, tiny_perturbed, tmp_path / "b", resume_every=2)
    with pytest.raises(Stop):
        train_compat(cfg, show_progress=False, on_step=stop, log=lambda m: None)
    shutil.copytree(tmp_path / "b/features", tmp_path / "features_copy")
    logs = []
    b = train_compat(cfg, show_progress=False, log=logs.append)
    assert any("resumed" in m and "batch 2" in m for m in logs)
    assert any("0 computed" in m for m in logs)  # the path features came from the cache
    assert b["steps"] == a["steps"]
    sa, sb = _state(tmp_path / "a"), _state(tmp_path / "b")
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    # a finished run started again changes nothing
    train_compat(cfg, show_progress=False, log=lambda m: None)
    for k, v in _state(tmp_path / "b").items():
        assert torch.equal(v, sb[k])

    # another config in the same folder is refused
    with pytest.raises(CompatTrainError, match="other inputs"):
        train_compat(_cfg(tiny_benchmark, tiny_perturbed, tmp_path / "b", lr=1e-2), show_progress=False, log=lambda m: None)

    # scoring: per-instruction scores, labels from the perturbation records, AUCs and rankings
    clean = tiny_benchmark / SPLITS / "train/train.json.gz"
    rep = score_instructions(ScoreRequest(tmp_path / "a/compat.pt", [clean, tiny_perturbed], tiny_benchmark / "scene_datasets",
                                          tmp_path / "scores.json", labels="perturbation", cache=tmp_path / "a/features"),
                             show_progress=False)
    on_disk = json.loads((tmp_path / "scores.json").read_text())
    assert on_disk["auc"] == pytest.approx(rep["auc"]) and on_disk["format"] == "ivln_ce.compat_scores/1"
    rows = on_disk["scores"]
    assert [r["label"] for r in rows if r["file"] == 0] == [1] * 24
    assert all(r["label"] == 0 and r["kind"] != "clean" for r in rows if r["file"] == 1)
    assert set(on_disk["auc_by_kind"]) == {r["kind"] for r in rows if r["file"] == 1}
    assert on_disk["ranking"]["truncate"]["pairs"] == sum(1 for r in rows if r["kind"] == "truncate")
    # the AUC is the Mann-Whitney statistic of the written scores
    from ivln_ce.metrics.roc import roc_auc

    assert on_disk["auc"] == pytest.approx(roc_auc([r["score"] for r in rows], [r["label"] for r in rows]))


@pytest.mark.slow
def test_separates_clean_from_perturbed_pairs_far_above_chance(tiny_benchmark, tiny_perturbed, tmp_path):
    """Trained on the tiny train split (24 clean episodes and their perturbations; 240 steps, about
    7 minutes on a busy 2-core machine), the model tells the clean pairs of that split from the
    perturbed ones far above chance (AUC 0.5; its null standard deviation here is about 0.06)."""
    cfg = _cfg(tiny_benchmark, tiny_perturbed, tmp_path / "run", epochs=40, views=ViewSettings(spacing=2.0, max_viewpoints=6, views=2, size=32))
    train_compat(cfg, show_progress=False, log=lambda m: None)
    rep = score_instructions(ScoreRequest(tmp_path / "run/compat.pt", [Path(cfg.episodes), tiny_perturbed], Path(cfg.scenes_dir),
                                          tmp_path / "s.json", labels="perturbation", cache=tmp_path / "run/features"),
                             show_progress=False)
    # measured (seeded, CPU): AUC 0.76 overall; trajectory family 0.92, truncate 1.00, sentence_shuffle 0.89;
    # the in-place word swaps (direction, landmark, room) stay near chance at this size
    assert rep["auc"] > 0.7, rep["auc_by_kind"]
    assert rep["auc_by_family"]["trajectory"] > 0.8, rep["auc_by_kind"]
    assert rep["auc_by_kind"]["truncate"] > 0.8 and rep["auc_by_kind"]["sentence_shuffle"] > 0.8, rep["auc_by_kind"]


def test_smoke_cli_train_and_score(tiny_benchmark, tiny_perturbed, tmp_path, capsys):
    clean = str(tiny_benchmark / SPLITS / "train/train.json.gz")
    scenes = str(tiny_benchmark / "scene_datasets")
    out = tmp_path / "run"
    assert main(["train-compat", "--episodes", clean, "--perturbed", str(tiny_perturbed), "--scenes-dir", scenes, "--out", str(out),
                 "--epochs", "1", "--batch-size", "8", "--views", "1", "--max-viewpoints", "2", "--size", "16"]) == 0
    assert "6 steps" in capsys.readouterr().out
    assert {"compat.pt", "resume.pt", "history.json", "tb", "features", "ivln_run.json"} <= {p.name for p in out.iterdir()}
    assert main(["score-instructions", "--checkpoint", str(out / "compat.pt"), "--episodes", clean, str(tiny_perturbed),
                 "--scenes-dir", scenes, "--out", str(tmp_path / "s.json"), "--labels", "perturbation"]) == 0
    printed = capsys.readouterr().out
    rep = json.loads((tmp_path / "s.json").read_text())
    assert f"AUC (all labelled): {rep['auc']:.3f}" in printed and "| truncate |" in printed
    assert len(rep["scores"]) == 24 + sum(1 for r in rep["scores"] if r["file"] == 1)


def test_cli_errors(tiny_benchmark, tiny_perturbed, tmp_path, capsys):
    clean = str(tiny_benchmark / SPLITS / "train/train.json.gz")
    scenes = str(tiny_benchmark / "scene_datasets")
    cases = [
        (["train-compat", "--episodes", str(tmp_path / "none.json.gz"), "--scenes-dir", scenes, "--out", str(tmp_path / "o")], "no such file"),
        (["train-compat", "--episodes", clean, "--scenes-dir", str(tmp_path / "nodir"), "--out", str(tmp_path / "o")], "no such folder"),
        (["train-compat", "--episodes", clean, "--scenes-dir", scenes, "--out", str(tmp_path / "o"), "--batch-size", "6",
          "--perturbed", str(tiny_perturbed), "--views", "1", "--max-viewpoints", "2", "--size", "16"], "does not split"),
        (["train-compat", "--episodes", clean, "--scenes-dir", scenes, "--out", str(tmp_path / "o"), "--mix", "2", "1"], "three weights"),
        (["train-compat", "--episodes", str(tiny_perturbed), "--perturbed", str(tiny_perturbed), "--scenes-dir", scenes,
          "--out", str(tmp_path / "o2")], "holds perturbed episodes"),
        (["score-instructions", "--checkpoint", str(tmp_path / "no.pt"), "--episodes", clean, "--scenes-dir", scenes,
          "--out", str(tmp_path / "s.json")], "no such checkpoint"),
        (["score-instructions", "--checkpoint", clean, "--episodes", clean, "--scenes-dir", scenes,
          "--out", str(tmp_path / "s.json"), "--labels", str(tmp_path / "nolabels.json")], "no such file"),
    ]
    for argv, match in cases:
        assert main(argv) == 2, argv
        assert match in capsys.readouterr().err, argv
    # a folder that holds something else is refused, its files untouched
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy/mine.txt").write_text("keep")
    assert main(["train-compat", "--episodes", clean, "--perturbed", str(tiny_perturbed), "--scenes-dir", scenes,
                 "--out", str(tmp_path / "busy")]) == 2
    assert "not empty" in capsys.readouterr().err and (tmp_path / "busy/mine.txt").read_text() == "keep"
    # a checkpoint that is not a compatibility model
    torch.save({"format": "other"}, tmp_path / "other.pt")
    assert main(["score-instructions", "--checkpoint", str(tmp_path / "other.pt"), "--episodes", clean, "--scenes-dir", scenes,
                 "--out", str(tmp_path / "s.json")]) == 2
    assert "not a compatibility-model checkpoint" in capsys.readouterr().err
