"""Results tables: seeds grouped by config, mean ± standard error, three formats."""

import csv
import io
import json
import math

import pytest

from ivln_ce.cli import main
from ivln_ce.viz.table import format_table, identity, results_table


def write_run(folder, label, seed, metrics, **config_changes):
    folder.mkdir(parents=True, exist_ok=True)
    config = {"name": f"run{seed}", "seed": seed, "results_dir": str(folder), "eval": {"agent": "policy", "label": label, "workers": 2},
              "policy": {"name": "cma", "lr": 1e-4}, "data": {"root": "data"}}
    for key, value in config_changes.items():
        node = config
        *head, last = key.split("__")
        for h in head:
            node = node[h]
        node[last] = value
    stats = {"split": "val_unseen", "label": label, "config": config, **metrics}
    (folder / f"iterative_stats_ckpt_{label}_val_unseen.json").write_text(json.dumps(stats))


def metrics(tl, sr, tndtw):
    return {"path_length": tl, "distance_to_goal": 7.0, "oracle_success": 0.4, "ndtw": 0.5, "success": sr, "spl": 0.3, "tndtw": tndtw}


def test_single_runs_of_different_seeds_name_the_seed_first(tmp_path):
    """The demo (seed 0, no image sensors, 1 environment) beside an eval (seed 100, 2
    environments): the rows say seed first; the number of environments is no difference."""
    write_run(tmp_path / "demo", "random", 0, metrics(9.0, 0.30, 0.35), eval__num_envs=1, simulator={"sensors": []})
    write_run(tmp_path / "eval", "random", 100, metrics(9.5, 0.31, 0.37), eval__num_envs=2, simulator={"sensors": ["rgb"]})
    rows = results_table([tmp_path / "demo", tmp_path / "eval"])
    assert [r.name for r in rows] == ["random (seed=0, simulator.sensors=[])", "random (seed=100, simulator.sensors=['rgb'])"]


def test_seeds_are_grouped_and_other_differences_are_rows(tmp_path):
    write_run(tmp_path / "s1", "cma", 1, metrics(9.0, 0.30, 0.40))
    write_run(tmp_path / "s2", "cma", 2, metrics(10.0, 0.33, 0.44), eval__workers=8)  # cosmetic difference
    write_run(tmp_path / "s3", "cma", 3, metrics(11.0, 0.36, 0.42), results_dir="elsewhere")
    write_run(tmp_path / "lr", "cma", 1, metrics(8.0, 0.20, None), policy__lr=3e-4)  # a different setting
    rows = results_table([tmp_path / "s1", tmp_path / "s2", tmp_path / "s3", tmp_path / "lr"])
    assert [r.n for r in rows] == [3, 1]
    seeds, other = rows
    assert seeds.seeds == [1, 2, 3]
    assert seeds.mean["TL"] == pytest.approx(10.0) and seeds.se["TL"] == pytest.approx(1.0 / math.sqrt(3))
    assert seeds.mean["SR"] == pytest.approx(33.0) and seeds.se["SR"] == pytest.approx(3.0 / math.sqrt(3))
    sd = math.sqrt(((40 - 42) ** 2 + (44 - 42) ** 2 + 0) / 2)
    assert seeds.mean["t-nDTW"] == pytest.approx(42.0) and seeds.se["t-nDTW"] == pytest.approx(sd / math.sqrt(3))
    assert other.se["TL"] is None and other.mean["t-nDTW"] is None
    # same label, different settings: the row names say what differs
    assert seeds.name == "cma (policy.lr=0.0001)" and other.name == "cma (policy.lr=0.0003)"

    md = format_table(rows, "md")
    assert "| cma (policy.lr=0.0001) | val_unseen | 3 | 10.00 ± 0.58 |" in md
    # SR, SPL; SDTW and CLS absent from these hand-made stats files; t-nDTW null
    assert md.splitlines()[-1].endswith("| 20.00 | 30.00 | n/a | n/a | n/a |")
    assert "instruction" not in md  # every run used the full instructions
    tex = format_table(rows, "latex")
    assert r"10.00 $\pm$ 0.58" in tex and r"val\_unseen" in tex and tex.startswith(r"\begin{tabular}")
    table = list(csv.DictReader(io.StringIO(format_table(rows, "csv"))))
    assert table[0]["n"] == "3" and float(table[0]["TL"]) == pytest.approx(10.0) and float(table[0]["TL_se"]) == pytest.approx(0.57735, rel=1e-4)
    assert table[1]["t-nDTW"] == "" and table[0]["seeds"] == "1 2 3"
    with pytest.raises(ValueError, match="format"):
        format_table(rows, "html")


def test_ignore_keys_merge_rows_and_identity_drops_cosmetics(tmp_path):
    write_run(tmp_path / "a", "cma", 1, metrics(9.0, 0.3, 0.4), policy__lr=1e-4)
    write_run(tmp_path / "b", "cma", 2, metrics(11.0, 0.3, 0.4), policy__lr=3e-4)
    assert len(results_table([tmp_path / "a", tmp_path / "b"])) == 2
    rows = results_table([tmp_path / "a", tmp_path / "b"], ignore=["policy.lr"])
    assert len(rows) == 1 and rows[0].n == 2 and rows[0].name == "cma"
    ident = identity({"seed": 3, "name": "x", "eval": {"label": "l", "agent": "policy"}, "data": {"root": "r"}}, ignore=["data"])
    assert ident == {"eval.agent": "policy"}


def test_table_of_real_evaluations_and_cli(evaluated, capsys):
    rows = results_table([evaluated], split="val_unseen")
    assert [r.name for r in rows] == ["oracle", "random"]  # differ by agent: separate rows
    stats = json.loads((evaluated / "iterative_stats_ckpt_random_val_unseen.json").read_text())
    assert rows[1].mean["SR"] == pytest.approx(100 * stats["success"]) and rows[1].mean["TL"] == pytest.approx(stats["path_length"])
    oracle = json.loads((evaluated / "iterative_stats_ckpt_oracle_val_unseen.json").read_text())
    for head, key in (("nDTW", "ndtw"), ("SDTW", "sdtw"), ("CLS", "cls")):
        assert rows[1].mean[head] == pytest.approx(100 * stats[key]) and rows[0].mean[head] == pytest.approx(100 * oracle[key])
        assert oracle[key] > stats[key]  # the oracle follows the path; the random agent does not (its SDTW is 0)
    assert rows[0].instruction == rows[1].instruction == "full"  # from the manifests
    assert main(["viz", "table", str(evaluated), "--format", "csv"]) == 0
    out = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["run"] for r in out] == ["oracle", "random"] and float(out[0]["t-nDTW"]) == pytest.approx(100 * json.loads(
        (evaluated / "iterative_stats_ckpt_oracle_val_unseen.json").read_text())["tndtw"])
    assert main(["viz", "table", str(evaluated / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_extreme_and_malformed_values_give_a_table_or_a_named_error(tmp_path, capsys):
    """Metrics near the float range, non-numbers and a config of the wrong type never end in a
    traceback: extremes aggregate (inf where the spread overflows), non-numbers read as n/a."""
    write_run(tmp_path / "s1", "cma", 1, metrics(1e308, "fast", 10**400))
    write_run(tmp_path / "s2", "cma", 2, metrics(-1e308, [0.3], 0.4))
    rows = results_table([tmp_path / "s1", tmp_path / "s2"])
    assert len(rows) == 1 and rows[0].n == 2
    assert rows[0].mean["TL"] == 0.0 and rows[0].se["TL"] == math.inf
    assert rows[0].mean["SR"] is None and rows[0].mean["t-nDTW"] == pytest.approx(40.0)
    assert main(["viz", "table", str(tmp_path / "s1"), str(tmp_path / "s2")]) == 0
    stats = tmp_path / "s1" / "iterative_stats_ckpt_cma_val_unseen.json"
    stats.write_text(json.dumps({"split": "val_unseen", "label": "cma", "config": [1, 2]}))
    assert main(["viz", "table", str(tmp_path / "s1"), str(tmp_path / "s2")]) == 2
    err = capsys.readouterr().err
    assert f"{stats}: field 'config'" in err and "Traceback" not in err


def fidelity(sr, ndtw, cls, tndtw=0.4):
    return {**metrics(9.0, sr, tndtw), "ndtw": ndtw, "sdtw": sr * ndtw, "cls": cls}


def write_manifest(folder, label, setting):
    (folder / f"manifest_ckpt_{label}_val_unseen.json").write_text(json.dumps(
        {"instruction": {"setting": setting, "seed": 0, "episodes_changed": 3, "analysis_only": setting != "full"}}))


def test_fidelity_columns_and_the_instruction_condition(tmp_path, capsys):
    # full instructions, two seeds; the last five tokens, one seed (a different eval.instruction: its own row)
    write_run(tmp_path / "f1", "cma", 1, fidelity(0.50, 0.60, 0.70))
    write_run(tmp_path / "f2", "cma", 2, fidelity(0.30, 0.40, 0.50))
    write_run(tmp_path / "l5", "cma", 1, fidelity(0.25, 0.20, 0.30), eval__instruction="last:5")
    for d, setting in (("f1", "full"), ("f2", "full"), ("l5", "last:5")):
        write_manifest(tmp_path / d, "cma", setting)
    rows = results_table([tmp_path / d for d in ("f1", "f2", "l5")])
    full, last5 = rows
    assert (full.n, full.instruction, last5.n, last5.instruction) == (2, "full", 1, "last:5")
    # SDTW = SR * nDTW per run: 0.30 and 0.12 -> mean 21, se |30 - 12| / 2 = 9; CLS 70, 50 -> 60 ± 10
    assert full.mean["SDTW"] == pytest.approx(21.0) and full.se["SDTW"] == pytest.approx(9.0)
    assert full.mean["CLS"] == pytest.approx(60.0) and full.se["CLS"] == pytest.approx(10.0)
    assert last5.mean["SDTW"] == pytest.approx(5.0) and last5.mean["CLS"] == pytest.approx(30.0) and last5.se["CLS"] is None

    md = format_table(rows, "md").splitlines()
    assert md[0] == "| run | split | instruction | n | TL | NE | OS | nDTW | SR | SPL | SDTW | CLS | t-nDTW |"
    assert md[1] == "|---|---|---|---:|" + "---:|" * 9
    assert md[2] == ("| cma (eval.instruction=None) | val_unseen | full | 2 | 9.00 ± 0.00 | 7.00 ± 0.00 | 40.00 ± 0.00 | "
                     "50.00 ± 10.00 | 40.00 ± 10.00 | 30.00 ± 0.00 | 21.00 ± 9.00 | 60.00 ± 10.00 | 40.00 ± 0.00 |")
    assert md[3] == ("| cma (eval.instruction=last:5) | val_unseen | last:5 | 1 | 9.00 | 7.00 | 40.00 | 20.00 | 25.00 | 30.00 | "
                     "5.00 | 30.00 | 40.00 |")
    table = list(csv.DictReader(io.StringIO(format_table(rows, "csv"))))
    assert [(r["instruction"], r["n"], r["SDTW"], r["CLS"], r["CLS_se"]) for r in table] == [
        ("full", "2", "21", "60", "10"), ("last:5", "1", "5", "30", "")]
    tex = format_table(rows, "latex").splitlines()
    assert tex[0] == r"\begin{tabular}{lll" + "r" * 10 + "}"
    assert tex[2].startswith(r"run & split & instruction & $n$ & TL") and r"SDTW & CLS & t-nDTW \\" in tex[2]
    assert r"last:5 & 1 & 9.00 & 7.00 & 40.00 & 20.00 & 25.00 & 30.00 & 5.00 & 30.00 & 40.00 \\" in tex[5]
    # only the full runs: no instruction column in Markdown and LaTeX, still one in CSV
    only_full = results_table([tmp_path / "f1", tmp_path / "f2"])
    assert "instruction" not in format_table(only_full, "md") and "instruction" not in format_table(only_full, "latex")
    assert next(csv.DictReader(io.StringIO(format_table(only_full, "csv"))))["instruction"] == "full"
    assert main(["viz", "table", str(tmp_path / "f1"), str(tmp_path / "l5")]) == 0
    assert "| last:5 | 1 |" in capsys.readouterr().out


def test_the_manifest_says_the_instruction_condition(tmp_path, capsys):
    # the manifest wins over the stats file; without either, the config; without any, full
    write_run(tmp_path / "a", "cma", 1, {**fidelity(0.5, 0.5, 0.5), "instruction": "full"})
    write_manifest(tmp_path / "a", "cma", "none")
    write_run(tmp_path / "b", "cma", 2, {**fidelity(0.5, 0.5, 0.5), "instruction": "other"})
    write_run(tmp_path / "c", "cma", 3, fidelity(0.5, 0.5, 0.5), eval__instruction="last:7")
    write_run(tmp_path / "d", "cma", 4, fidelity(0.5, 0.5, 0.5))
    rows = results_table([tmp_path / d for d in "abcd"], ignore=["eval.instruction"])
    # a: none (manifest, not the stats file's full), b: other (stats), c: last:7 (config), d: full (nothing recorded)
    assert [r.instruction for r in rows] == ["full/last:7/none/other"]  # one row (ignored key): every condition named
    # without the ignore, c's config differs (eval.instruction): its own row
    assert [r.instruction for r in results_table([tmp_path / d for d in "abcd"])] == ["full/none/other", "last:7"]
    # a damaged setting names the file and the field (exit status 2 from the command)
    write_manifest(tmp_path / "a", "cma", "last:5 | x")
    assert main(["viz", "table", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "manifest_ckpt_cma_val_unseen.json: field 'instruction.setting'" in err and "full, last:K, none or other" in err
