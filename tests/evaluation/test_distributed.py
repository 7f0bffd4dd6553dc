"""The evaluation's process group: joined for the run, left on the way out (only when the run
joined it), so that no rank exits with gloo's threads alive (SIGABRT after the work is done)."""

import pytest

from ivln_ce.cli import leave_process_group

dist = pytest.importorskip("torch.distributed", reason="torch is needed for torch.distributed")


def _file_store(tmp_path, name):
    """A one-rank group's rendezvous through a file (no MASTER_ADDR needed)."""
    return f"file://{tmp_path / name}"


def test_process_group_leaves_only_the_group_it_joined(tmp_path, monkeypatch):
    from ivln_ce.evaluation import distributed

    monkeypatch.setenv("IVLN_DIST_BACKEND", "gloo")
    joined = []
    real_init = distributed.init
    # one rank of one: the run's own group, created through a file store instead of MASTER_ADDR
    monkeypatch.setattr(distributed, "init", lambda r, w: joined.append((r, w)) or real_init(r, w, _file_store(tmp_path, "a")))
    assert not dist.is_initialized()
    with distributed.process_group(0, 1):
        assert dist.is_initialized() and dist.get_world_size() == 1
    assert joined == [(0, 1)] and not dist.is_initialized()  # created here: destroyed here

    dist.init_process_group("gloo", rank=0, world_size=1, init_method=_file_store(tmp_path, "b"))
    try:
        with distributed.process_group(0, 1):
            pass
        assert dist.is_initialized()  # the caller's group: left alone
    finally:
        dist.destroy_process_group()

    with pytest.raises(RuntimeError, match="boom"):
        with distributed.process_group(0, 1):
            raise RuntimeError("boom")
    assert not dist.is_initialized()  # destroyed on the error path too (no barrier there)


def test_cli_leaves_a_group_a_command_left_open(tmp_path):
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=_file_store(tmp_path, "c"))
    leave_process_group()
    assert not dist.is_initialized()
    leave_process_group()  # nothing to leave: a no-op
