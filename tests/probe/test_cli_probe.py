"""``ivln-ce probe build``: the printed counts, and clear refusals with exit status 2."""

import gzip
import json
import re

from ivln_ce.benchmark.synthetic import episodes_path
from ivln_ce.cli import main

from tests.probe.test_build import SPLIT, _data_copy


def test_probe_build_prints_and_writes_the_counts(tiny_benchmark, tmp_path, capsys):
    out = tmp_path / "probes"
    assert main(["probe", "build", "--data", str(tiny_benchmark), "--split", SPLIT, "--out", str(out), "--skills", "stop"]) == 0
    text = capsys.readouterr().out
    stats = json.loads((out / "statistics.json").read_text())
    n = stats["skills"]["stop"]["probes"]
    assert n > 0 and re.search(rf"stop +{n} probes +{3 * n} episodes \(implicit, explicit, one_step_ahead\)", text)
    assert f"probe build {SPLIT}: 36 source episodes (36 aligned), {n} cut points; 36 built, 0 reused" in text
    assert str(out / "episodes" / "stop.json.gz") in text and "direction" not in stats["skills"]
    assert main(["probe", "build", "--data", str(tiny_benchmark), "--split", SPLIT, "--out", str(out), "--skills", "stop"]) == 0
    assert "0 built, 36 reused" in capsys.readouterr().out


def test_refusals_exit_2_with_the_reason(tiny_benchmark, tmp_path, capsys):
    def strip(raw):
        for ep in raw["episodes"]:
            del ep["instruction_alignment"]

    def bad_segment(raw):
        raw["episodes"][4]["instruction_alignment"][1]["path"] = [1, 99]

    plain = _data_copy(tiny_benchmark, tmp_path / "plain", strip)
    hostile = _data_copy(tiny_benchmark, tmp_path / "hostile", bad_segment)
    eid = json.loads(gzip.open(episodes_path(tiny_benchmark, SPLIT)).read())["episodes"][4]["episode_id"]
    cases = [
        (["--data", str(plain)], ["has an instruction_alignment", "R2R-VLN-CE episodes carry none"]),
        (["--data", str(hostile)], ["val_unseen.json.gz", f"episode {eid} (episodes[4])",
                                    "field 'instruction_alignment[1].path'", "[1, 99] is not a span"]),
        (["--data", str(tiny_benchmark), "--skills", "stop,rooms"], ["unknown skill(s) ['rooms']", "choose from stop, direction, object, room"]),
        (["--data", str(tiny_benchmark), "--free-distance", "-1"], ["positive number of metres"]),
        (["--data", str(tiny_benchmark), "eval.agent=random"], ["only simulator.* and data.* overrides"]),
    ]
    for k, (args, needles) in enumerate(cases):
        assert main(["probe", "build", "--split", SPLIT, "--out", str(tmp_path / f"out{k}"), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ivln-ce probe: error: ")
        for needle in needles:
            assert needle in err, err
