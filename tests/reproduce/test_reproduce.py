"""``ivln-ce reproduce all --scale tiny --seeds 1`` end to end in one test: the tables' structure, every
cell traced to a results file, the coverage analytics, and a second run that reuses everything."""

import csv
import json
import shutil

import pytest

pytest.importorskip("torch", reason="training needs torch")

# the whole pipeline at tiny scale: minutes of training and evaluation (README: the long tests)
pytestmark = pytest.mark.slow

from ivln_ce.cli import main  # noqa: E402
from ivln_ce.reproduce.plan import COLUMNS, EVAL_SPLITS, MAP_MODES, REFERENCE_AGENTS, TABLE3  # noqa: E402


def test_reproduce_all_end_to_end(tiny_benchmark, tmp_path):
    """One test, not three sharing a fixture: under ``pytest -n 2`` a fixture shared by several
    tests could be built on both workers, and this pipeline is most of the slow suite's time."""
    out = tmp_path / "repro"
    data = out / "data"
    shutil.copytree(tiny_benchmark, data)
    assert main(["reproduce", "all", "--scale", "tiny", "--seeds", "1", "--out", str(out), "--data", str(data)]) == 0
    check_tables_have_the_papers_structure_and_every_cell_traces_to_a_file(out)
    check_coverage_analytics(out)
    check_a_second_run_reuses_every_step(out)


def check_tables_have_the_papers_structure_and_every_cell_traces_to_a_file(reproduction):
    out = reproduction
    for name in ("table3", "table4"):
        for ext in ("md", "csv", "tex"):
            assert (out / f"{name}.{ext}").stat().st_size > 200
        rows = list(csv.reader(open(out / f"{name}.csv")))
        head, body = rows[0], rows[1:]
        assert head[-14:] == [f"{s} {c}" for s in ("VS", "VU") for c in COLUMNS]
        expected = len(TABLE3) if name == "table3" else 2 * 3 * len(MAP_MODES)
        refs = len(REFERENCE_AGENTS)
        assert len(body) == 2 * expected + refs
        assert [r[head.index("source")] for r in body] == ["ours", "paper"] * expected + ["reference"] * refs
        assert [r[0] for r in body[-refs:]] == [f"{a} agent" for a in REFERENCE_AGENTS]
        sources = json.loads((out / f"{name}_sources.json").read_text())
        assert list(sources)[-refs:] == [f"reference_{a}" for a in REFERENCE_AGENTS]
        assert len(sources) == expected + refs
        for key, per_split in sources.items():
            for split in EVAL_SPLITS:
                assert len(per_split[split]) == 1  # one seed
                stats = json.loads((out / per_split[split][0]).read_text())
                assert stats["split"] == split and stats["label"] == "final"
        for a in REFERENCE_AGENTS:  # the reference rows come from the scripted agents' own results
            assert json.loads((out / sources[f"reference_{a}"]["val_unseen"][0]).read_text())["agent"] == a
        # the "ours" cells equal the results files (one seed: no error bar)
        for r, (key, per_split) in zip(body[0:2 * expected:2] + body[-refs:], sources.items(), strict=True):
            for s_i, split in enumerate(EVAL_SPLITS):
                stats = json.loads((out / per_split[split][0]).read_text())
                sr = r[head.index(f"{('VS', 'VU')[s_i]} SR")]
                assert sr == f"{100 * stats['success']:.1f}"
                tl = r[head.index(f"{('VS', 'VU')[s_i]} TL")]
                assert tl == f"{stats['path_length']:.1f}"
    findings = (out / "findings.md").read_text()
    # 3 + 4 findings of the paper, and the gate of every trained model: it reads its instruction, it
    # beats the random agent
    models = len(TABLE3) + 6
    assert findings.count("paired difference") + findings.count("not computed") == 3 + 4 + 2 * models
    assert findings.count("beats the random agent") == findings.count("reads its instruction") == models
    gate = json.loads((out / "findings.json").read_text())
    assert sum(1 for r in gate if r["finding"].endswith("reads its instruction (full - no instruction)") and r["computed"]) == models
    for key, mode in (("cma", "-"), ("map_cma_gt_iterative", "iterative")):
        stats = json.loads((out / "runs" / key / "seed0" / "eval" / f"val_unseen_{mode}_noinstruction"
                            / "iterative_stats_ckpt_final-instruction_none_val_unseen.json").read_text())
        assert stats["label"] == "final-instruction_none"
    assert "reference_random/seed0/eval/val_unseen_-" in json.loads((out / "fingerprints.json").read_text())
    readme = (out / "README.md").read_text()
    assert "--scale tiny" in readme and "Deviations" in readme and "cores" in readme


def check_coverage_analytics(reproduction):
    rows = list(csv.DictReader(open(reproduction / "coverage.csv")))
    assert {r["split"] for r in rows} == {"train", "val_unseen"}
    for split in ("train", "val_unseen"):
        rs = [r for r in rows if r["split"] == split]
        assert [int(r["episode_index"]) for r in rs] == list(range(1, len(rs) + 1))
        path = [float(r["path_observed"]) for r in rs]
        region = [float(r["region_observed"]) for r in rs]
        assert all(0 <= v <= 1 for v in path + region)
        assert region == sorted(region)  # a tour's memory only grows
        assert region[0] < region[-1] or len(rs) == 1
    assert (reproduction / "coverage.png").stat().st_size > 5000


def check_a_second_run_reuses_every_step(reproduction):
    before = {p: p.stat().st_mtime_ns for p in reproduction.rglob("ckpt.*.pth")}
    assert main(["reproduce", "all", "--scale", "tiny", "--seeds", "1", "--out", str(reproduction),
                 "--data", str(reproduction / "data")]) == 0
    after = {p: p.stat().st_mtime_ns for p in reproduction.rglob("ckpt.*.pth")}
    assert before == after and len(before) >= 10  # no model was trained again
    log = (reproduction / "reproduce.log").read_text()
    assert log.count("reproduce all at scale tiny") == 2
