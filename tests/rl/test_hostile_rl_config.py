"""Hostile ``train.rl.*`` (and the train.* and seed keys an RL run reads) overrides of
``ivln-ce train`` with the RL recipes: NaN, infinities, 1e400, negative and zero counts, values
past their range, seeds beyond what numpy and torch take (2**70 once ended in 'Overflow when
unpacking long long'), wrong types, reward weights that are infinite or all zero. Each run must
start training on a valid config or exit 2 with one message naming the key: never a traceback,
never a wrong accept. An oracle written from the keys' documented ranges (``RLConfig``,
``docs``) says which value is valid. The trainer itself is replaced by its checks plus the
seeded critic (what runs before any rollout), so a valid config costs milliseconds.
Drawn from a fixed seed; the fast suite runs a sample, the slow suite every case and pairs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.hostile import Case, classify, run_cli

torch = pytest.importorskip("torch", reason="the RL trainer's checks import torch")

SEED = 20260314
RECIPES = [Path(__file__).resolve().parents[2] / "configs" / "embedded" / f"cma_rl_{r}.yaml" for r in ("goal", "fidelity")]

#: key -> (kind, low, high, low open): the documented range of every key the RL trainer reads
KEYS = {
    "train.rl.gamma": ("float", 0.0, 1.0, False),
    "train.rl.gae_lambda": ("float", 0.0, 1.0, False),
    "train.rl.value_coef": ("float", 0.0, 1000.0, False),
    "train.rl.entropy_coef": ("float", 0.0, 1000.0, False),
    "train.rl.ppo_clip": ("float", 0.0, 10.0, True),
    "train.rl.max_grad_norm": ("float", 0.0, math.inf, False),
    "train.rl.cls_shaping": ("float", -1000.0, 1000.0, False),
    "train.rl.success_reward": ("float", -1e6, 1e6, False),
    "train.rl.failure_reward": ("float", -1e6, 1e6, False),
    "train.lr": ("float", 0.0, 1.0, True),
    "train.rl.ppo_epochs": ("int", 1, 1000, False),
    "train.rl.minibatches": ("int", 1, 100_000, False),
    "train.rl.checkpoint_every": ("int", 1, 1_000_000, False),
    "train.update_size": ("int", 0, 10_000_000, False),
    "train.batch_size": ("int", 1, 100_000, False),
    "train.iterations": ("int", 1, 10_000, False),
    "train.num_envs": ("int", 1, 256, False),
    "seed": ("int", 0, 2**31 - 1, False),
}
VALUES = ["0", "1", "-1", "0.5", "1.5", "7", "1000", "1001", ".nan", ".inf", "-.inf", "nan", "1e400", "1e-300", "x", "true",
          "[]", "{}", "null", "99999999999999999999999", str(2**70), str(2**31 - 1), str(2**31), str(2**32), "100000",
          "10000000", "10000001", "1e308"]
#: train.rl.reward values and whether they are valid (a name, or NAME:WEIGHT,... with finite
#: weights of magnitude <= 1e6, names once each, not all weights 0)
REWARDS = [("goal", True), ("fidelity", True), ("ndtw", True), ("goal:0.5,fidelity:1", True), ("fidelity:2,goal:-1", True),
           ("goal:+.5e-3", True), ("goal:1e6", True), ("goal:1e999", False), ("goal:-1e308,ndtw:1e308", False),
           ("goal:1e7", False), ("goal:0", False), ("goal:0,ndtw:0", False), ("goal,goal", False), ("swim", False),
           ("", False), ("goal:", False), ("goal:nan", False), ("goal:inf", False), ("goal:x", False), (",", False)]


def valid(key: str, text: str) -> str:
    """``ok``, ``fail`` or ``any`` (an integral float for an integer key: the config may take it)."""
    kind, lo, hi, lo_open = KEYS[key]
    v = yaml.safe_load(text) if text.strip() else ""
    if isinstance(v, bool) or v is None or isinstance(v, (list, dict)):
        return "fail"
    if isinstance(v, str):
        try:
            v = float(v) if kind == "float" else int(v)
        except ValueError:
            return "fail"
    if kind == "int" and isinstance(v, float):
        return "any" if v.is_integer() else "fail"
    if not math.isfinite(v):
        return "fail"
    inside = (v > lo if lo_open else v >= lo) and v <= hi
    return "ok" if inside else "fail"


def stub_trainer(monkeypatch):
    """``train_rl`` replaced by what it does before any rollout: the config checks, the reward
    spec and the seeded critic."""
    import ivln_ce.rl.trainer as trainer

    def checks_only(cfg, show_progress=True):
        trainer.check_rl_config(cfg)
        trainer.reward_spec(cfg)
        trainer.build_value_head(int(cfg.seed), "cpu")

    monkeypatch.setattr(trainer, "train_rl", checks_only)


def argv(recipe: Path, *overrides: str) -> list[str]:
    return ["train", "--config", str(recipe), "policy.checkpoint=runs/cma/ckpt.11.pth", *overrides]


def combine(expects: list[str]) -> str:
    return "fail" if "fail" in expects else "any" if "any" in expects else "ok"


def cases(slow: bool) -> list[Case]:
    rng = np.random.default_rng(SEED)
    single: list[tuple[str, str, str]] = []  # (override, expect, the key)
    for key in KEYS:
        for text in VALUES:
            single.append((f"{key}={text}", valid(key, text), key))
    single += [(f"train.rl.reward={text}", "ok" if ok else "fail", "train.rl.reward") for text, ok in REWARDS]
    single += [(f"train.rl.algorithm={v}", "ok" if v in ("a2c", "ppo") else "fail", "train.rl.algorithm")
               for v in ("a2c", "ppo", "ppo2", "A2C", "1", "null")]
    out = []
    for k, (override, expect, key) in enumerate(single):
        recipe = RECIPES[k % 2]
        out.append(Case(f"{recipe.stem}: {override}", lambda folder, outside, r=recipe, o=override: argv(r, o), expect, (key,)))
    pairs = 100 if slow else 0
    for _ in range(pairs):
        picked = [single[int(i)] for i in rng.choice(len(single), 2, replace=False)]
        if picked[0][2] == picked[1][2]:
            continue
        overrides = [p[0] for p in picked]
        expect = combine([p[1] for p in picked])
        blame = tuple(p[2] for p in picked if p[1] != "ok")
        out.append(Case(f"pair: {' '.join(overrides)}", lambda folder, outside, o=overrides: argv(RECIPES[0], *o), expect, blame))
    return out


@pytest.mark.parametrize("share", [0.12, pytest.param(1.0, marks=pytest.mark.slow)], ids=["sample", "every-case"])
def test_hostile_rl_overrides(monkeypatch, tmp_path, share):
    """The fast suite runs a fixed random eighth of the single overrides (each ~0.2 s: a config
    load), the slow suite every one and 100 random pairs."""
    stub_trainer(monkeypatch)
    monkeypatch.chdir(tmp_path)  # a run that wrongly started would write below here, not into the repository
    all_cases = cases(slow=share == 1.0)
    assert len(all_cases) > 300
    keep = np.random.default_rng(SEED + 1).random(len(all_cases)) < share
    selected = [c for c, k in zip(all_cases, keep) if k]
    problems = [p for case in selected if (p := classify(case, *run_cli(case.argv(tmp_path, tmp_path), case.seconds)))]
    assert not problems, f"{len(problems)} of {len(selected)} runs failed:\n" + "\n".join(problems)
    assert list(tmp_path.iterdir()) == []  # checks only: nothing written


def test_the_oracle_has_valid_and_invalid_values_for_every_key():
    """A case list that only ever expects refusals (or only acceptances) could not fail for the right reason."""
    for key in KEYS:
        outcomes = {valid(key, v) for v in VALUES}
        assert {"ok", "fail"} <= outcomes, key


def test_a_seed_beyond_torch_is_named_before_work(monkeypatch, tmp_path):
    stub_trainer(monkeypatch)
    rc, _, err, _ = run_cli(argv(RECIPES[0], f"seed={2**70}"))
    assert rc == 2 and "'seed'" in err and "Overflow" not in err
