# Recompute, with the code of d888dd2 and the rebuilt `small` benchmark, the training fingerprint of
# the episodic-GT seed-0 run of 2026-11-27 (its train_summary.json: 1640c9f6...). The fingerprint
# digests the resolved config (without paths and cosmetic keys), the training data files, the
# scenes and the code.
import json, sys
from ivln_ce.config import load_config
from ivln_ce.training.trainer import load_training_data, training_fingerprint
root = sys.argv[1]
cfg = load_config("configs/embedded/map_cma_episodic_gt.yaml", [f"data.root={root}", "train.device=cuda", "seed=0",
    "train.num_envs=14", "train.loader_workers=3", "train.out_dir=/tmp/w/A", "results_dir=/tmp/w/A"])
data = load_training_data(cfg)
print("files digested:", ", ".join(sorted(data.files)))
print("recomputed:", training_fingerprint(cfg, data))
