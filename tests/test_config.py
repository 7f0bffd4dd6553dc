import pytest

from ivln_ce.config import ConfigError, closest_key, load_config, resolved, ExperimentConfig

REPO_CONFIGS = __import__("pathlib").Path(__file__).resolve().parents[1] / "configs"


def test_defaults_and_repo_default_yaml_resolve():
    cfg = load_config(REPO_CONFIGS / "default.yaml")
    r = resolved(cfg)
    assert r["metrics"]["tndtw"] == {"variant": "official", "d_th": 3.0, "distance": "euclidean", "on_infeasible": "error"}
    assert r["data"]["tours"] == "data/tours.json"  # interpolation resolved
    assert r["results_dir"] == "results/default"


def test_misspelled_key_in_file_names_key_file_and_closest(tmp_path):
    f = tmp_path / "exp.yaml"
    f.write_text("metrics:\n  tndtw:\n    varaint: paper\n")
    with pytest.raises(ConfigError) as info:
        load_config(f)
    msg = str(info.value)
    assert str(f) in msg and "'metrics.tndtw.varaint'" in msg and "did you mean 'metrics.tndtw.variant'" in msg


def test_misspelled_section_and_override(tmp_path):
    with pytest.raises(ConfigError, match=r"command line: unknown config key 'metrcs'; did you mean 'metrics'"):
        load_config(None, ["metrcs.tndtw.d_th=2"])
    with pytest.raises(ConfigError, match=r"'data.tour'; did you mean 'data.tours'"):
        load_config(None, ["data.tour=x.json"])


def test_bad_enum_value_and_bad_type(tmp_path):
    with pytest.raises(ConfigError, match=r"'metrics.tndtw.variant' must be one of \['official', 'paper'\], got 'papr'; did you mean 'paper'"):
        load_config(None, ["metrics.tndtw.variant=papr"])
    f = tmp_path / "t.yaml"
    f.write_text("seed: many\n")
    with pytest.raises(ConfigError, match=rf"{f}: invalid value for 'seed'"):
        load_config(f)


def test_base_chain_and_override_precedence(tmp_path):
    (tmp_path / "base.yaml").write_text("name: base\nmetrics:\n  tndtw:\n    d_th: 2.0\n")
    (tmp_path / "child.yaml").write_text("_base_: base.yaml\nname: child\n")
    cfg = load_config(tmp_path / "child.yaml", ["metrics.tndtw.variant=paper"])
    assert cfg.name == "child" and cfg.metrics.tndtw.d_th == 2.0 and cfg.metrics.tndtw.variant.value == "paper"
    assert resolved(cfg)["results_dir"] == "results/child"
    (tmp_path / "loop.yaml").write_text("_base_: loop.yaml\n")
    with pytest.raises(ConfigError, match="circular"):
        load_config(tmp_path / "loop.yaml")


def test_config_is_read_only():
    cfg = load_config()
    with pytest.raises(Exception):
        cfg.seed = 3


def test_closest_key_searches_everywhere_when_no_sibling_matches():
    assert closest_key("on_infeasibel", ExperimentConfig) == "metrics.tndtw.on_infeasible"
