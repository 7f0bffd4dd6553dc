
import pytest

torch = pytest.importorskip("torch", reason="RedNet needs torch")

from ivln_ce.models.official_weights import load_rednet  # noqa: E402
from ivln_ce.models.rednet import RedNet, RedNetSegmenter, mean_iou  # noqa: E402
from ivln_ce.training.rednet import RedNetTrainConfig, train_rednet  # noqa: E402


def test_mean_iou_hand_value():
    conf = torch.tensor([[8, 2, 0], [1, 4, 0], [0, 0, 0]])  # class 2 absent from the ground truth
    miou, iou = mean_iou(conf)
    assert iou[0].item() == pytest.approx(8 / 11) and iou[1].item() == pytest.approx(4 / 7)
    assert miou == pytest.approx((8 / 11 + 4 / 7) / 2) and torch.isnan(iou[2])


def test_segmenter_output_is_class_maps_at_depth_resolution():
    seg = RedNetSegmenter(RedNet(depth=18))
    out = seg(torch.randint(0, 256, (2, 24, 24, 3), dtype=torch.uint8), torch.rand(2, 32, 32, 1))
    assert out.shape == (2, 32, 32) and out.dtype == torch.uint8 and int(out.max()) < 13


@pytest.mark.slow
def test_training_loop_checkpoints_resumes_and_reports(tmp_path):
    cfg = RedNetTrainConfig(out=str(tmp_path), preset="tiny", size=32, frames_per_house=4, epochs=1, batch_size=4, max_train_houses=1, max_eval_houses=1)
    report = train_rednet(cfg, log=lambda *_: None)
    assert 0.0 <= report["miou"] <= 1.0 and len(report["confusion"]) == 13
    assert (tmp_path / "frames_train_32.npz").exists() and (tmp_path / "report.json").exists()
    cfg.epochs = 2
    messages = []
    report2 = train_rednet(cfg, log=messages.append)
    assert any("resumed" in m for m in messages) and [h["epoch"] for h in report2["history"]] == [1, 2]
    model = RedNet(depth=18)
    assert load_rednet(model, tmp_path / "checkpoint.pt").ok  # the official-layout loader reads our checkpoints


def test_a_train_rednet_resume_refuses_a_malicious_checkpoint(tmp_path):
    """``--resume`` reads ``checkpoint.pt`` with the allow-listed loader, before any frame is
    rendered: an ``exec`` payload is refused, naming the file and the global, and never runs."""
    from ivln_ce.models.official_weights import UnsafeCheckpointError
    from tests.models.fakes import PAYLOADS

    marker = tmp_path / "PWNED"
    ckpt = tmp_path / "checkpoint.pt"
    torch.save({"model_state": {}, "optim_state": {}, "epoch": 1, "history": [PAYLOADS["builtins.exec"](marker)], "config": {}}, ckpt, pickle_protocol=3)
    cfg = RedNetTrainConfig(out=str(tmp_path), preset="tiny", size=32, frames_per_house=1, epochs=2, batch_size=1, max_train_houses=1, max_eval_houses=1)
    with pytest.raises(UnsafeCheckpointError, match=r"checkpoint\.pt.*builtins\.exec"):
        train_rednet(cfg, log=lambda *_: None)
    assert not marker.exists()
    assert not (tmp_path / "frames_train_32.npz").exists()  # refused before any work was done
