"""``probe run`` files each reading under its own probe id and condition (whatever the number of
environments), walks the teacher's plan, resumes only from identical inputs, and refuses bad folders."""

import hashlib
import json
import shutil

import numpy as np
import pytest

from ivln_ce.cli import main
from ivln_ce.data.episodes import load_episodes
from ivln_ce.probe.agent_rollout import RolloutRule
from ivln_ce.probe.probe_set import ProbeSetError, read_probe_set
from ivln_ce.probe.run_store import RunStoreError
from ivln_ce.probe.teacher import TeacherRule

from tests.probe.runs import built_probes, run


@pytest.fixture(scope="module")
def probes(tmp_path_factory, tiny_benchmark):
    return built_probes(tmp_path_factory, tiny_benchmark)


def _hash_distribution(tokens, steps: int) -> np.ndarray:
    """A distribution that names what the agent saw: its instruction and how many steps it walked."""
    h = hashlib.sha256(np.asarray(tokens, dtype=np.int64).tobytes() + steps.to_bytes(4, "little")).digest()
    w = np.frombuffer(h[:16], dtype=np.uint32).astype(np.float64) + 1.0
    return w / w.sum()


class HashScorer:
    """Memory keyed by stream (its step count), a distribution from what it observes."""

    name = "hash"
    image_keys = ()
    timings: dict = {}

    def __init__(self):
        self.steps: dict[str, int] = {}
        self.executed: dict[str, list[int]] = {}

    def step(self, views, executed, rollout=None):
        out = []
        for v, a in zip(views, executed):
            n = self.steps.get(v.stream_id, 0)
            out.append(_hash_distribution(v.obs["instruction"], n))
            self.steps[v.stream_id] = n + 1
            self.executed.setdefault(v.tour_id, []).append(int(a))
        return np.stack(out)

    def record(self, streams, actions):
        raise AssertionError("no rollout in these runs: the driver chooses no action")

    def drop(self, stream):
        self.steps.pop(stream)


def test_each_reading_is_filed_under_its_probe_and_condition(probes, tiny_benchmark, tmp_path):
    results = {}
    for k in (1, 3):
        scorer = HashScorer()
        run(probes, tiny_benchmark, tmp_path / f"k{k}", f"eval.num_envs={k}", "eval.agent=uniform", limit=4, scorer=scorer,
            rollout=RolloutRule(steps=0))  # the readings alone (test_rollout.py files the rollouts)
        recs = json.loads((tmp_path / f"k{k}" / "probe_results.json").read_text())["records"]
        results[k] = {(r["probe_id"], r["condition"]): r for r in recs}
        for r in recs:
            own = {e.episode_id: e for e in load_episodes(probes / "probes" / r["probe_id"] / "episodes.json.gz")}
            ep = own[r["episode_id"]]
            assert r["episode_id"] == f"{r['probe_id']}.{r['condition']}"
            assert np.allclose(r["distribution"], _hash_distribution(ep.instruction_tokens, r["teacher_steps"]), atol=1e-6)
            assert np.linalg.norm(np.subtract(r["position"], ep.reference_path[-1])) <= 0.25 + 1e-3
            walked = scorer.executed[r["episode_id"]]  # the teacher's actions, then STOP at p_j
            assert len(walked) == r["teacher_steps"] + 1 and walked[-1] == 0 and 0 not in walked[:-1]
        # the conditions of a probe walk the very same steps; so do probes cut at the same point
        by_point = {}
        for r in recs:
            by_point.setdefault((r["source_episode"], r["point"]), set()).add(tuple(scorer.executed[r["episode_id"]]))
        assert all(len(v) == 1 for v in by_point.values())
    assert results[1].keys() == results[3].keys() and len(results[1]) == 3 * 4 + 2 * 4 * 3  # stop; direction, object, room
    for key, r in results[1].items():
        assert r["distribution"] == results[3][key]["distribution"] and r["position"] == results[3][key]["position"]


@pytest.mark.slow  # several runs; the fast suite keeps probe build's resume test
def test_resume_reuses_only_identical_inputs(probes, tiny_benchmark, tmp_path, capsys):
    SD = ("stop", "direction")  # the counts below are for two skills (the build has four)
    mine = tmp_path / "probes"
    shutil.copytree(probes, mine)
    out = tmp_path / "out"
    first = run(mine, tiny_benchmark, out, "eval.agent=uniform", limit=2, skills=SD)
    assert (first.computed, first.reused) == (4, 0)
    before = (out / "probe_results.json").read_bytes()
    assert main(["probe", "run", "--probes", str(mine), "--out", str(out), "--data", str(tiny_benchmark), "--limit", "2",
                 "--skills", "stop,direction", "eval.agent=uniform"]) == 0
    printed = capsys.readouterr().out
    assert "probe run (uniform): 4 probes; 0 computed, 4 reused" in printed and "stop                        2       25.00" in printed
    assert json.loads((out / "probe_results.json").read_bytes())["records"] == json.loads(before)["records"]
    # another agent, another teacher rule: nothing is reused
    assert run(mine, tiny_benchmark, out, "eval.agent=forward_biased", limit=2, skills=SD).reused == 0
    assert run(mine, tiny_benchmark, out, "eval.agent=forward_biased", limit=2, skills=SD,
               teacher=TeacherRule(waypoint_radius=0.3)).reused == 0
    # one probe's episodes change: only it is recomputed; a damaged record is recomputed too
    stop = read_probe_set(mine, ("stop",), limit=1).probes[0]
    f = mine / "probes" / stop.probe_id / "episodes.json.gz"
    eps = load_episodes(f)
    eps.episodes[0].instruction_text += " "
    eps.write(f)
    other = sorted(p.name for p in (out / "records").iterdir() if p.stem != stop.probe_id)[0]
    (out / "records" / other).write_text("{")
    got = run(mine, tiny_benchmark, out, "eval.agent=forward_biased", limit=2, skills=SD, teacher=TeacherRule(waypoint_radius=0.3))
    assert (got.computed, got.reused) == (2, 2)
    # fewer probes: the others' records are removed
    fewer = run(mine, tiny_benchmark, out, "eval.agent=forward_biased", limit=1, skills=SD, teacher=TeacherRule(waypoint_radius=0.3))
    assert (fewer.reused, fewer.removed) == (2, 2) and len(list((out / "records").iterdir())) == 2
    # the tables of several runs (one agent each)
    other_agent = tmp_path / "oracle"
    run(mine, tiny_benchmark, other_agent, "eval.agent=probe_oracle", limit=1)
    assert main(["probe", "tables", "--runs", str(out), str(other_agent), "--out", str(tmp_path / "t"), "--resamples", "200"]) == 0
    md = (tmp_path / "t" / "probe_tables.md").read_text()
    assert "| skill | forward_biased | probe_oracle |" in md and "| stop | 0.00 [" in md and "| 100.00 [" in md


def test_bad_folders_are_refused(probes, tiny_benchmark, tmp_path, capsys):
    half = tmp_path / "half"
    shutil.copytree(probes, half)
    manifest = json.loads((half / "probe_build.json").read_text())
    (half / "probe_build.json").write_text(json.dumps({**manifest, "complete": False}))
    with pytest.raises(ProbeSetError, match="interrupted"):
        read_probe_set(half)
    (half / "probe_build.json").write_text(json.dumps(manifest))
    pid = sorted(p.name for p in (half / "probes").iterdir())[0]
    meta = json.loads((half / "probes" / pid / "probe.json").read_text())
    (half / "probes" / pid / "probe.json").write_text(json.dumps({**meta, "probe_id": "stop-e1-p1"}))
    with pytest.raises(ProbeSetError, match=f"field 'probe_id' is 'stop-e1-p1', but the folder is '{pid}'"):
        read_probe_set(half)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(RunStoreError, match="not a probe run folder"):
        run(probes, tiny_benchmark, foreign, "eval.agent=uniform", limit=1)
    cases = [(["--probes", str(tiny_benchmark)], "no probe_build.json"),
             (["--probes", str(probes), "eval.agent=random"], "eval.agent=random: probe run reads an action distribution"),
             (["--probes", str(probes), "eval.agent=policy"], "eval.agent=policy needs policy.name"),
             (["--probes", str(probes), "--limit", "-1"], "--limit must be >= 0")]
    for args, needle in cases:
        assert main(["probe", "run", "--out", str(tmp_path / "o"), "--data", str(tiny_benchmark), *args]) == 2
        err = capsys.readouterr().err
        assert needle in err, err


@pytest.mark.slow
def test_a_learned_policy_reads_the_same_with_one_or_two_environments(probes, tiny_benchmark, tmp_path):
    """A random-init MAP-CMA (maps and recurrent state keyed by stream) gives each probe the same
    distribution whether its conditions ran side by side or one after another."""
    pytest.importorskip("torch", reason="policies need torch")
    policy = ["eval.agent=policy", "policy.name=map_cma", "policy.depth_backbone=small", "mapping.semantics=gt",
              "simulator.sensors=[depth,semantic]", *[f"simulator.{s}.{d}=32" for s in ("depth", "semantic") for d in ("width", "height")]]
    got, rolled = {}, {}
    for k in (1, 2):
        run(probes, tiny_benchmark, tmp_path / f"k{k}", *policy, f"eval.num_envs={k}", limit=1, skills=("stop",),
            rollout=RolloutRule(steps=4))
        recs = json.loads((tmp_path / f"k{k}" / "probe_results.json").read_text())["records"]
        got[k] = {(r["probe_id"], r["condition"]): r["distribution"] for r in recs}
        rolled[k] = {(r["probe_id"], r["condition"]): (r["rollout"]["actions"], r["rollout"]["end_position"]) for r in recs}
    assert got[1].keys() == got[2].keys() and len(got[1]) == 3
    assert rolled[1] == rolled[2]  # the policy's own actions after p_j, its memory continuing per stream
    for key in got[1]:
        assert np.allclose(got[1][key], got[2][key], atol=1e-5)
    assert len({tuple(v) for v in got[1].values()}) == 3  # the instruction reaches the policy: conditions differ
