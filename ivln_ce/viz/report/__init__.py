"""Static tour viewer: an HTML report of an evaluation results folder (``ivln-ce viz report``).

``build_report(results_dir)`` writes ``index.html`` (metrics table, fingerprint and
leaderboard validity, per-tour t-nDTW bars) and one page per tour (scene plan with the
agent, oracle and target paths, the official t-nDTW DTW alignment, an episode stepper with
metrics, maps, frames and videos). It opens from ``file://``: no server, no network.
"""

from ivln_ce.viz.report.builder import Report, build_report
from ivln_ce.viz.report.images import ImageSettings

__all__ = ["Report", "build_report", "ImageSettings"]
