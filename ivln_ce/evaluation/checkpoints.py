"""Evaluating a folder of checkpoints (``policy.checkpoint=DIR``), as a training run writes them.

Every ``ckpt.{i}.pth`` in the folder is evaluated once, in index order (not file-time order),
with the label ``i`` (outputs ``*_ckpt_{i}_{split}.json``). A checkpoint whose outputs exist
with a matching fingerprint is not re-run; an interrupted evaluation resumes per tour as
usual. With ``eval.poll=true`` the folder is watched for new checkpoints every
``eval.poll_interval`` seconds until ``eval.poll_timeout`` seconds pass without one. After
each checkpoint the summary table ``checkpoints_{split}.json`` / ``.md`` is rewritten with
every checkpoint's metrics and the best one by t-nDTW (ties by SPL, then the lower index),
and TensorBoard scalars ``eval_{split}_{metric}`` are logged at step = index + 1 under
``RESULTS/tb``.
"""

from __future__ import annotations

import math
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from ivln_ce.data.jsonio import atomic_write_bytes, write_json

CHECKPOINT = re.compile(r"^ckpt\.(\d+)\.pth$")
TABLE_METRICS = ("path_length", "distance_to_goal", "oracle_success", "ndtw", "success", "spl", "tndtw")


def checkpoint_files(folder: str | Path) -> list[tuple[int, Path]]:
    """``(index, path)`` of every ``ckpt.{i}.pth`` in ``folder``, in index order."""
    out: dict[int, Path] = {}
    for p in sorted(Path(folder).iterdir()):
        m = CHECKPOINT.match(p.name)
        if m and p.is_file():
            i = int(m.group(1))
            if i in out:  # ckpt.1.pth and ckpt.01.pth would share the label and outputs "1"
                raise ValueError(f"policy.checkpoint: {folder} holds two checkpoints with index {i}: {out[i].name} and {p.name}")
            out[i] = p
    return sorted(out.items())


def with_values(cfg: DictConfig, **values: Any) -> DictConfig:
    """A read-only copy of ``cfg`` with dotted keys set (``policy.checkpoint=...``)."""
    new = OmegaConf.to_container(cfg, resolve=False)
    for dotted, value in values.items():
        node = new
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value
    out = OmegaConf.merge(OmegaConf.structured(type(OmegaConf.to_object(cfg))), new)
    OmegaConf.set_readonly(out, True)
    return out


def best_checkpoint(rows: list[dict]) -> dict | None:
    """The best row by t-nDTW, ties by SPL, then the lower index (missing values rank last)."""
    def known(v) -> float:
        return v if v is not None and not math.isnan(v) else -math.inf

    def key(r):
        return (-known(r.get("tndtw")), -known(r.get("spl")), r["checkpoint"])

    return min(rows, key=key) if rows else None


def format_checkpoint_table(rows: list[dict], best: dict | None) -> str:
    head = "| ckpt | " + " | ".join(TABLE_METRICS) + " |"
    lines = [head, "|" + "---|" * (len(TABLE_METRICS) + 1)]
    for r in rows:
        cells = []
        for m in TABLE_METRICS:
            v = r.get(m)
            cells.append("n/a" if v is None else f"{v:.2f}" if m in ("path_length", "distance_to_goal") else f"{100 * v:.2f}")
        mark = " **best**" if best is not None and r["checkpoint"] == best["checkpoint"] else ""
        lines.append(f"| {r['checkpoint']}{mark} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def evaluate_checkpoint_folder(cfg: DictConfig, evaluate: Callable[..., dict[str, Any] | None], rank: int | None = None,
                               world_size: int | None = None, show_progress: bool = True) -> dict[str, Any] | None:
    """Evaluate every checkpoint of the folder ``policy.checkpoint`` with ``evaluate`` (the
    evaluator's, passed in so that this module stays below it)."""
    folder = Path(cfg.policy.checkpoint)
    results = Path(cfg.results_dir)
    split = cfg.eval.split
    done: dict[int, dict] = {}
    writer = None
    is_main = not (world_size and world_size > 1) or rank == 0
    if is_main:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(results / "tb"))
    from ivln_ce.evaluation.distributed import from_rank0  # the ranks were joined by the evaluator's entry point

    deadline = time.monotonic() + float(cfg.eval.poll_timeout)
    try:
        while True:
            # rank 0 lists the folder and decides when to stop, so that every rank evaluates the
            # same checkpoints in the same order (their collectives pair up)
            listing = [(i, str(p)) for i, p in checkpoint_files(folder) if i not in done] if is_main else None
            new = [(i, Path(p)) for i, p in from_rank0(listing)]
            for i, path in new:
                sub = with_values(cfg, **{"policy.checkpoint": str(path), "eval.label": str(i)})
                if is_main:
                    print(f"ivln-ce eval: checkpoint {path.name}", file=sys.stderr)
                summary = evaluate(sub, rank=rank, world_size=world_size, show_progress=show_progress)
                if not is_main:
                    done[i] = {}
                    continue
                row = {"checkpoint": i, "file": path.name, **{m: summary.get(m) for m in TABLE_METRICS}}
                done[i] = row
                rows = [done[k] for k in sorted(done)]
                best = best_checkpoint(rows)
                write_json(results / f"checkpoints_{split}.json", {"split": split, "folder": str(folder), "checkpoints": rows,
                                                                   "best": best}, indent=2)
                atomic_write_bytes(results / f"checkpoints_{split}.md", format_checkpoint_table(rows, best).encode())
                if summary["resume"]["computed"] == 0:
                    continue  # evaluated by an earlier run, which logged it already
                for m in TABLE_METRICS:
                    v = summary.get(m)
                    if v is not None and not (isinstance(v, float) and math.isnan(v)):
                        writer.add_scalar(f"eval_{split}_{m}", float(v), i + 1)
                writer.flush()
            if new:
                deadline = time.monotonic() + float(cfg.eval.poll_timeout)
            stop = (not cfg.eval.poll or time.monotonic() > deadline) if is_main else None
            if from_rank0(stop):
                break
            time.sleep(float(cfg.eval.poll_interval))
    finally:
        if writer is not None:
            writer.close()
    if not done:
        raise ValueError(f"policy.checkpoint: {folder} holds no ckpt.{{i}}.pth file")
    if not is_main:
        return None
    rows = [done[k] for k in sorted(done)]
    return {"checkpoints": rows, "best": best_checkpoint(rows), "split": split, "folder": str(folder),
            "table": str(results / f"checkpoints_{split}.md")}
