"""Summarize the default-scale CMA run (python summarize.py WORK/cma_e2): validation per epoch (full / none), the FORWARD-always
baseline on the validation store, optimizer steps, collection record."""
import json, sys
from collections import Counter
from pathlib import Path
import numpy as np
from ivln_ce.training.store import TrajectoryStore

out = Path(sys.argv[1])
s = json.loads((out / "train_summary.json").read_text())
print("optimizer_steps", s["optimizer_steps"], "episodes", s["episodes_collected"], "steps", s["steps_collected"])
print("collections", json.dumps(s["collections"]))
print("seconds_total", s["seconds_total"])
print(json.dumps(s["validation"], indent=None)[:3000])
labels = Counter()
store = TrajectoryStore(out / "val_store")
for e in store:
    labels.update(np.asarray(e.steps["oracle_actions"]).tolist())
n = sum(labels.values())
print("val labels", dict(labels), "n", n, "FORWARD share", labels[1] / n if 1 in labels else None)
