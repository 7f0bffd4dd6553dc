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
    assert md.splitlines()[-1].endswith("| 20.00 | 30.00 | n/a |")
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
