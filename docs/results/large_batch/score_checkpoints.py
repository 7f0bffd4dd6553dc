"""Teacher-forced validation of every checkpoint of a finished run, with ablated instructions.

The runs of this folder were started before ``train.val_ablations`` existed; this scores each
epoch's checkpoint on the run's own validation store (``OUT/val_store``) with the function the
trainer uses (``training.validation.score_store_ablations``): full instructions (equal to the run's own
``validation`` records, checked), none, and the last 5 tokens. Writes one JSON file.

    python docs/results/large_batch/score_checkpoints.py RUN_DIR [RUN_DIR ...] [--last] --out scores.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

from ivln_ce.config import load_config
from ivln_ce.data.jsonio import atomic_write_text
from ivln_ce.models.factory import build_policy
from ivln_ce.training.store import TrajectoryStore
from ivln_ce.training.trainer import _overrides, load_training_data
from ivln_ce.training.validation import score_store_ablations


def score_run(run: Path, ablations: list[str], last_only: bool = False) -> list[dict]:
    tree = json.loads((run / "config.json").read_text())
    summary = json.loads((run / "train_summary.json").read_text())
    recorded = {(r["round"], r["epoch"]): r for r in summary["validation"]}
    cfg = load_config(None, _overrides(tree))
    vocab = load_training_data(cfg).vocab_size
    store = TrajectoryStore(run / "val_store")
    rows = []
    try:
        ckpts = sorted(run.glob("ckpt.*.pth"), key=lambda p: int(re.findall(r"\d+", p.name)[0]))
        for n, ckpt in enumerate(ckpts):
            if last_only and n < len(ckpts) - 1:
                continue
            pcfg = load_config(None, _overrides(tree) + [f"policy.checkpoint={ckpt}"])
            policy, _ = build_policy(pcfg.policy, vocab, pcfg.train, "cpu")
            row = {"run": run.name, "checkpoint": ckpt.name, "epoch": n + 1}
            scores = score_store_ablations(policy, store, int(cfg.train.batch_size), float(cfg.train.inflection_weight),
                                           cfg.train.precision, ablations=tuple(ablations))
            for text, s in scores.items():
                row[text] = {k: s[k] for k in ("action_accuracy", "action_loss")}
            rec = recorded.get((0, n))
            if rec is not None:  # the trainer's own record of this epoch: the same function, the same weights
                assert abs(rec["action_accuracy"] - row["full"]["action_accuracy"]) < 1e-12, (ckpt, rec, row)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        store.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--ablations", default="none,last:5")
    ap.add_argument("--last", action="store_true", help="only each run's last checkpoint")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: share the machine with a running job)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [r for run in args.runs for r in score_run(run, args.ablations.split(","), args.last)]
    atomic_write_text(args.out, json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
