"""Training curves (``ivln-ce viz curves``): loss, action accuracy, β and validation t-nDTW;
or, for reinforcement fine-tuning runs, return, rollout fidelity, losses and entropy.

Reads the TensorBoard event files a training run writes (``torch.utils.tensorboard``) with
TensorBoard's own event reader, and draws one figure with four panels, every given run in
its own colour. Tags (the trainer's names): ``train/loss``, ``train/action_loss``,
``train/progress_loss``, ``train/action_accuracy``, ``train/beta`` against the training step,
and ``eval_{split}_tndtw`` against the checkpoint (step = checkpoint index + 1, SPEC §10.2).
Runs of ``train.trainer=rl`` log ``rl/*`` instead (``rl/trainer.py``): their figure shows the
mean return and each reward term, the rollouts' SR, nDTW and CLS, the policy and value losses
and the entropy, against the optimizer step. The two kinds cannot share one figure (their
steps mean different things); mixing them is refused.

Names taken from the files (tags, splits, folder names) are shown as plain text, never parsed
as matplotlib mathtext (a tag like ``$x^{{{...}}}$`` would recurse without end), and the figure
is written through ``viz.files.write_output`` (never through a link planted at its name).

A training folder may come from someone else, so its event files are input to be checked
(``events.py``): found without following any link below the folder (a link there is refused,
never read), plain files of bounded size, each one a TensorBoard event file by its framing.
A folder without one, or whose files hold none of the scalars drawn, is refused by name.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Sequence

from ivln_ce.viz.events import check_event_file, event_files
from ivln_ce.viz.files import ResultsError, write_output

LOSS_TAGS = ("train/loss", "train/action_loss", "train/progress_loss")
#: the RL trainer's scalars shown per panel (tag, line style); x 100 where the panel says so
RL_PANELS = (
    ("mean return of the rollouts", False, (("rl/return", "-"), ("rl/reward_goal", "--"), ("rl/reward_fidelity", ":"),
                                            ("rl/reward_ndtw", "-."))),
    ("rollouts: SR, nDTW, CLS (x 100)", True, (("rl/success", "-"), ("rl/ndtw", "--"), ("rl/cls", ":"))),
    ("losses", False, (("rl/policy_loss", "-"), ("rl/value_loss", "--"))),
    ("entropy of the policy", False, (("rl/entropy", "-"),)),
)
EVAL_TNDTW = re.compile(r"^eval_(.+)_tndtw$")
#: every scalar a panel draws (besides eval_<split>_tndtw)
DRAWN_TAGS = frozenset((*LOSS_TAGS, "train/action_accuracy", "train/beta",
                        *(tag for _, _, tags in RL_PANELS for tag, _ in tags)))
#: validation splits one run may show in the t-nDTW panel
MAX_EVAL_SPLITS = 20


def plain(text: str, limit: int = 80) -> str:
    """``text`` shown as it is (dollar signs escaped, so matplotlib never parses it as mathtext),
    cut to ``limit`` characters so one long name cannot squeeze the panels to nothing."""
    text = str(text)
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text.replace("$", r"\$")


def read_scalars(train_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of a run: tag -> [(step, value)] sorted by step.

    A run resumed into a new event file repeats some steps; the later file wins (event file
    names start with their creation time, so name order is write order)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    merged: dict[str, dict[int, float]] = {}
    for f in event_files(train_dir):
        check_event_file(f)
        acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
        try:
            acc.Reload()
        except Exception as exc:  # a truncated file from a killed run: say which
            raise ResultsError(f"{f}: cannot read this TensorBoard event file ({exc})") from exc
        for tag in acc.Tags().get("scalars", []):
            series = merged.setdefault(tag, {})
            for ev in acc.Scalars(tag):
                series[int(ev.step)] = float(ev.value)
    return {tag: sorted(s.items()) for tag, s in merged.items()}


def _name(d: Path, all_dirs: Sequence[Path]) -> str:
    names = [p.name for p in all_dirs]
    return d.name if names.count(d.name) == 1 else str(d)


def plot_curves(train_dirs: Sequence[str | Path], out: str | Path, names: Sequence[str] | None = None) -> Path:
    """Write the four-panel figure of one or more runs to ``out`` (.png or .svg)."""
    from matplotlib.figure import Figure

    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"{out}: the figure must be a .png or .svg file")
    dirs = [Path(d) for d in train_dirs]
    if not dirs:
        raise ValueError("give at least one training folder")
    runs = [(names[k] if names else _name(d, dirs), read_scalars(d)) for k, d in enumerate(dirs)]
    for d, (_, scalars) in zip(dirs, runs):
        drawn = [t for t, pts in scalars.items() if pts and (t in DRAWN_TAGS or EVAL_TNDTW.match(t))]
        if not drawn:
            raise ResultsError(f"{d}: its TensorBoard event files hold none of the scalars drawn (train/loss, "
                               "train/action_accuracy, train/beta, eval_<split>_tndtw, rl/...); not a training run of ivln-ce")
        evals = sum(1 for t in scalars if EVAL_TNDTW.match(t))
        if evals > MAX_EVAL_SPLITS:
            raise ResultsError(f"{d}: {evals} validation t-nDTW tags (eval_<split>_tndtw), more than the {MAX_EVAL_SPLITS} "
                               "one panel can show")
    rl = [any(t.startswith("rl/") for t in scalars) for _, scalars in runs]
    if any(rl) and not all(rl):
        raise ValueError("reinforcement fine-tuning runs (rl/* scalars: "
                         + ", ".join(plain(n) for (n, _), r in zip(runs, rl) if r)
                         + ") and other training runs cannot share one figure: plot them separately")
    names = ", ".join(plain(n) for n, _ in runs)
    colors = [f"C{k % 10}" for k in range(len(runs))]
    if all(rl):
        fig = Figure(figsize=(12, 8), dpi=110, layout="constrained")
        fig.suptitle(f"reinforcement fine-tuning: {names}", fontsize=12)
        axes = fig.subplots(2, 2)
        for ax, (title, percent, tags) in zip([a for row in axes for a in row], RL_PANELS):
            _finish(ax, title, "optimizer step", _draw(ax, runs, colors, tags, 100.0 if percent else 1.0))
        return _save(fig, out)
    panels = [
        ("loss", "training step", [(t, s) for t, s in zip(LOSS_TAGS, ("-", "--", ":"))]),
        ("action accuracy", "training step", [("train/action_accuracy", "-")]),
        ("β (teacher-forcing / DAgger mixing)", "training step", [("train/beta", "-")]),
    ]
    has_eval = any(EVAL_TNDTW.match(t) for _, scalars in runs for t in scalars)
    # only the panels with data: an empty panel says nothing (validation needs train.eval_splits)
    shown = [p for p in panels if any(scalars.get(t) for _, scalars in runs for t, _ in p[2])]
    n = len(shown) + (1 if has_eval else 0)
    if n == 0:
        raise ValueError(f"{', '.join(str(d) for d in dirs)}: no training scalars (train/*) in the TensorBoard events")
    rows, cols = (1, n) if n <= 2 else (2, 2)
    fig = Figure(figsize=(max(10, 6 * cols), 4.5 * rows), dpi=110, layout="constrained")
    fig.suptitle(f"training curves: {names}" + ("" if has_eval else "  (no validation curve: the runs had no train.eval_splits)"),
                 fontsize=12)
    grid = fig.subplots(rows, cols, squeeze=False)
    axes = [a for row in grid for a in row]
    for ax, (title, xlabel, tags) in zip(axes, shown):
        _finish(ax, title, xlabel, _draw(ax, runs, colors, tags))
    if has_eval:
        ax = axes[len(shown)]
        drawn = False
        for (name, scalars), c in zip(runs, colors):
            for k, tag in enumerate(sorted(t for t in scalars if EVAL_TNDTW.match(t))):
                pts = scalars[tag]
                split = EVAL_TNDTW.match(tag).group(1)
                scale = 100.0 if max(v for _, v in pts) <= 1.0 else 1.0  # logged as a fraction or x100
                ax.plot([p[0] for p in pts], [scale * p[1] for p in pts], ("-o", "--s", ":^")[k % 3], color=c, lw=1.4, ms=4,
                        label=plain(f"{name}: {split}"))
                drawn = True
        _finish(ax, "validation t-nDTW (x 100)", "checkpoint", drawn)
    for ax in axes[n:]:
        ax.set_visible(False)
    return _save(fig, out)


def _draw(ax, runs, colors, tags, scale: float = 1.0) -> bool:
    """Each run's series of ``tags`` (tag, line style) on ``ax``, in the run's colour; whether
    anything was drawn."""
    drawn = False
    for (name, scalars), c in zip(runs, colors):
        for tag, style in tags:
            pts = scalars.get(tag)
            if pts:
                marker = "o" if len(pts) <= 3 else ""  # a series of one or two points shows as points
                ax.plot([p[0] for p in pts], [scale * p[1] for p in pts], style + marker, color=c, lw=1.4, ms=6,
                        label=plain(f"{name}: {tag.split('/', 1)[-1]}" if len(tags) > 1 or len(runs) > 1 else tag))
                drawn = True
    return drawn


def _save(fig, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format=out.suffix.lower()[1:])
    return write_output(out, buf.getvalue())


def _finish(ax, title: str, xlabel: str, drawn: bool) -> None:
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no data logged", transform=ax.transAxes, ha="center", va="center", color="0.5")
