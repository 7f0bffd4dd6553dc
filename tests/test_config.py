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


@pytest.mark.parametrize("override, key", [
    ("metrics.tndtw.d_th=0", "metrics.tndtw.d_th"),  # used to divide by zero after the whole run
    ("metrics.tndtw.d_th=-3", "metrics.tndtw.d_th"),  # used to print t-nDTW 271
    ("metrics.success_distance=.nan", "metrics.success_distance"),
    ("simulator.nav_cell=0", "simulator.nav_cell"),
    ("simulator.rgb.width=0", "simulator.rgb.width"),
    ("simulator.depth.hfov=180", "simulator.depth.hfov"),
    ("eval.num_envs=0", "eval.num_envs"),
    ("eval.device=gpu", "eval.device"),
    ("simulator.sensors=[lidar]", "simulator.sensors"),
    ("simulator.sensors=[depth,depth]", "simulator.sensors"),
    ("mapping.world_extent=1e5", "mapping.world_extent"),  # used to allocate 16 TB
    ("mapping.world_extent=2", "mapping.world_extent"),  # smaller than the egocentric window
    ("env.oracle_step_limit=-2", "env.oracle_step_limit"),
    ("policy.rgb_depth=51", "policy.rgb_depth"),
    ("seed=-1", "seed"),
    ("eval.poll_interval=1e10", "eval.poll_interval"),  # used to pass, then crash in time.sleep
    ("eval.poll_timeout=1e300", "eval.poll_timeout"),
])
def test_out_of_range_values_name_the_key_and_source(override, key):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    msg = str(err.value)
    assert msg.startswith("command line: ") and f"'{key}'" in msg and "must be" in msg


def test_value_errors_name_the_file_that_set_them(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("metrics:\n  tndtw:\n    d_th: 0\n")
    with pytest.raises(ConfigError, match=rf"{f}: config key 'metrics.tndtw.d_th'"):
        load_config(f)
    assert load_config(f, ["metrics.tndtw.d_th=2.5"]).metrics.tndtw.d_th == 2.5  # a later override fixes it


def test_official_profile_yaml_matches_the_profile_table():
    from ivln_ce.config import OFFICIAL_PROFILE, profile_of

    cfg = load_config(REPO_CONFIGS / "profiles" / "official.yaml")
    assert profile_of(cfg) == {"profile": "official", "flags": OFFICIAL_PROFILE}
    assert profile_of(load_config())["profile"] == "fixed"
    assert profile_of(load_config(None, ["env.oracle_double_query=true"]))["profile"] == "custom"


def test_official_profile_after_a_recipe_changes_only_the_switches():
    """The profile is an overlay: added after a recipe it must not reset the recipe's data,
    name or oracle step limit (a `_base_` in the profile once did, silently)."""
    from ivln_ce.config import OFFICIAL_PROFILE, profile_of

    ft = REPO_CONFIGS / "paper" / "map_cma" / "gt_iterative" / "1_ftune_dagger.yaml"
    recipe = load_config(ft, ["policy.checkpoint=x.pth"])
    both = load_config([ft, REPO_CONFIGS / "profiles" / "official.yaml"], ["policy.checkpoint=x.pth"])
    assert recipe.env.oracle_step_limit == both.env.oracle_step_limit == -1
    assert (both.name, both.data.root) == (recipe.name, recipe.data.root)
    assert profile_of(both) == {"profile": "official", "flags": OFFICIAL_PROFILE}
    alone = load_config(REPO_CONFIGS / "embedded" / "cma.yaml")
    embedded = load_config([REPO_CONFIGS / "embedded" / "cma.yaml", REPO_CONFIGS / "profiles" / "official.yaml"])
    assert embedded.data.root == alone.data.root == "data/synthetic_small"
    assert (embedded.train.epochs, embedded.train.lr) == (alone.train.epochs, alone.train.lr) == (12, 1e-3)


def test_required_values_marked_in_a_recipe_must_be_given(tmp_path):
    f = tmp_path / "ft.yaml"
    f.write_text("policy:\n  name: map_cma\n  checkpoint: ???\n")
    with pytest.raises(ConfigError, match=rf"{f}: config key 'policy.checkpoint' must be given"):
        load_config(f)
    assert load_config(f, ["policy.checkpoint=runs/tf/ckpt.7.pth"]).policy.checkpoint == "runs/tf/ckpt.7.pth"
    later = tmp_path / "later.yaml"
    later.write_text("policy:\n  checkpoint: a.pth\n")
    assert load_config([f, later]).policy.checkpoint == "a.pth"  # a later file may give it too
