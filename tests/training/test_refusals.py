"""Training settings that would silently train something else, or nothing, are refused before
any work: tour memories under episodic DAgger batches, an official batch order that leaves no
batch, and bad ``reproduce`` options (checked before the benchmark is built)."""

import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from ivln_ce.cli import main  # noqa: E402
from ivln_ce.config import ConfigError, load_config  # noqa: E402
from ivln_ce.training.errors import TrainError  # noqa: E402
from ivln_ce.training.trainer import check_train_config, train  # noqa: E402

from tests.training.test_trainer import latent  # noqa: E402


@pytest.mark.parametrize("name", ["tour_cma", "pool_cma", "pool_end_cma"])
def test_tour_memory_policies_are_refused_under_episodic_dagger_batches(tmp_path, name):
    cfg = load_config(None, latent(tmp_path, tmp_path / "x", f"policy.name={name}"))
    with pytest.raises(ConfigError, match=f"policy.name={name} keeps a tour memory.*train.trainer=tour_sequential"):
        check_train_config(cfg)
    check_train_config(load_config(None, latent(tmp_path, tmp_path / "x", "policy.name=cma")))  # CMA has none


@pytest.mark.slow
def test_an_official_batch_order_without_a_single_batch_is_refused(tiny_benchmark, tmp_path):
    # 2 episodes in three loader shares of batch 2: every share's only batch is incomplete and dropped
    cfg = load_config(None, latent(tiny_benchmark, tmp_path / "o", "train.update_size=2", "train.official_batching=true"))
    with pytest.raises(TrainError, match="no training batch: the official batch order"):
        train(cfg, show_progress=False)


@pytest.mark.parametrize("flag, value, message", [("--num-envs", "0", "--num-envs must be an integer in [1, 256], got 0"),
                                                   ("--device", "tpu", "--device must be cpu, cuda or cuda:N")])
def test_reproduce_checks_its_options_before_building_anything(tmp_path, capsys, flag, value, message):
    data = tmp_path / "data"
    assert main(["reproduce", "table3", "--scale", "tiny", "--out", str(tmp_path / "out"), "--data", str(data), flag, value]) == 2
    assert message in capsys.readouterr().err
    assert not data.exists() and not (tmp_path / "out").exists()


def test_channels_last_is_refused_off_cuda(tmp_path):
    cfg = load_config(None, latent(tmp_path, tmp_path / "x", "policy.name=map_cma", "simulator.sensors=[depth,semantic]",
                                   "train.channels_last=true"))
    with pytest.raises(ConfigError, match="train.channels_last=true is for CUDA"):
        check_train_config(cfg)
    cfg = load_config(None, latent(tmp_path, tmp_path / "x", "policy.name=map_cma", "simulator.sensors=[depth,semantic]",
                                   "train.channels_last=true", "train.device=cuda"))
    try:
        check_train_config(cfg)
    except ConfigError as exc:  # no GPU here: only the device check may refuse it
        assert "channels_last" not in str(exc), exc
