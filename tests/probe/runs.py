"""Shared set-up of the ``probe run`` tests: the tiny benchmark's probes, built once per test run."""

from __future__ import annotations

from pathlib import Path

from ivln_ce.probe.build import BuildRequest, build_probes
from ivln_ce.probe.run import RunRequest, run_probes

from tests.conftest import build_once

SPLIT = "val_unseen"


def built_probes(tmp_path_factory, tiny: Path) -> Path:
    """Stop and direction probes of the tiny benchmark's val_unseen (read-only: copy to change)."""
    return build_once(tmp_path_factory, "probes_tiny",
                      lambda out: build_probes(BuildRequest(data=tiny, split=SPLIT, out=out, progress=False)))


def run(probes: Path, tiny: Path, out: Path, *overrides: str, limit: int = 6, scorer=None, **kw):
    req = RunRequest(probes=probes, out=out, data=tiny, overrides=tuple(overrides), limit=limit, progress=False,
                     resamples=kw.pop("resamples", 500), **kw)
    return run_probes(req, scorer=scorer)
