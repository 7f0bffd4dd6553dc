"""The tables and findings of ``reproduce`` from hand-made results files: mean ± standard error
over seeds, paired differences and their verdicts, computed by hand below."""

import csv
import json

from ivln_ce.reproduce.plan import EVAL_SPLITS, table3_runs
from ivln_ce.reproduce.tables import stats_file, write_tables

# val_unseen t-nDTW per seed (val_seen gets the same values; TL is 5, 6, 7 m for every model)
TNDTW = {
    "cma": [0.30, 0.34, 0.38],
    "tour_cma": [0.31, 0.33, 0.41],  # - CMA: +1, -1, +3 -> mean +1.0, sd 2, se 2/sqrt(3) = 1.15
    "pool_cma": [0.40, 0.45, 0.47],  # - CMA: +10, +11, +9 -> mean +10.0, se 0.58: a significant gain
    "pool_end_cma": [0.30, 0.34, None],  # seed 2 missing: 2 paired seeds, difference 0 +- 0
    "reference_random": [0.20, 0.20, 0.20],  # CMA - random: +10, +14, +18 -> +14.0 +- 2.3
    "reference_forward": [0.25, 0.25, 0.25],
}


def _write(out, key, seed, tndtw):
    for split in EVAL_SPLITS:
        f = stats_file(out, key, seed, split, "-")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"split": split, "label": "final", "path_length": 5.0 + seed, "distance_to_goal": 3.0,
                                 "oracle_success": 0.5, "ndtw": 0.4, "success": 0.25, "spl": 0.2, "tndtw": tndtw}))


def test_cells_and_findings_match_a_hand_computation(tmp_path):
    for key, values in TNDTW.items():
        for seed, v in enumerate(values):
            if v is not None:
                _write(tmp_path, key, seed, v)
    result = write_tables(tmp_path, "table3", table3_runs(), seeds=3)
    rows = list(csv.reader(open(tmp_path / "table3.csv")))
    head, body = rows[0], {(r[0], r[1]): r for r in rows[1:]}
    cell = lambda name, src, col: body[(name, src)][head.index(col)]  # noqa: E731
    assert cell("CMA", "ours", "VU t-nDTW") == "34.0 ± 2.3"  # mean 34, sd 4, se 4/sqrt(3)
    assert cell("CMA", "ours", "VU TL") == "6.0 ± 0.6"  # 5, 6, 7 m
    assert cell("CMA", "ours", "VS SR") == "25.0 ± 0.0"
    assert cell("CMA", "paper", "VU t-nDTW") == "38"
    assert cell("PoolEndCMA", "ours", "VU TL") == "5.5 ± 0.5"  # two seeds: 5, 6
    assert cell("random agent", "reference", "VU t-nDTW") == "20.0 ± 0.0"
    assert cell("forward agent", "reference", "VS t-nDTW") == "25.0 ± 0.0"
    v = result["verdicts"]
    assert v[0] == ("Latent tour memory does not help: TourCMA - CMA: paired difference in val_unseen t-nDTW +1.0 ± 1.2 "
                    "over 3 seed(s) (paper -2) - reproduced (no significant gain).")
    assert "PoolCMA - CMA: paired difference in val_unseen t-nDTW +10.0 ± 0.6 over 3 seed(s)" in v[1]
    assert v[1].endswith("not reproduced (a significant gain).")
    assert "PoolEndCMA - CMA: paired difference in val_unseen t-nDTW +0.0 ± 0.0 over 2 seed(s)" in v[2]
    assert v[3] == "CMA beats the random agent: paired difference in val_unseen t-nDTW +14.0 ± 2.3 over 3 seed(s) - yes."
    assert (tmp_path / "findings.md").read_text().count("beats the random agent") == 4
    sources = json.loads((tmp_path / "table3_sources.json").read_text())
    assert sources["reference_random"]["val_unseen"] == [
        str(stats_file(tmp_path, "reference_random", s, "val_unseen", "-").relative_to(tmp_path)) for s in range(3)]
    assert len(sources["pool_end_cma"]["val_seen"]) == 2
