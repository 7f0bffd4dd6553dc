from collections import Counter

import pytest

from ivln_ce.fidelity.compat_data import CLEAN, CompatPair, MixSampler, PathRef, exclusion_matrix, path_key


def _path(name: str, n: int = 3) -> PathRef:
    pts = tuple((float(i), 0.0, float(len(name))) for i in range(n))
    return PathRef(f"s/{name}.glb", name, pts, path_key(f"s/{name}.glb", pts) + name)


P = {k: _path(k) for k in ("A", "B", "C")}
DETOUR = _path("Adetour", 5)


def _clean():
    # path A has three instructions, B two, C one
    out = []
    for path, texts in (("A", ["a1", "a2", "a3"]), ("B", ["b1", "b2"]), ("C", ["c1"])):
        for t in texts:
            out.append(CompatPair(t, f"text {t}", P[path], CLEAN, "ground_truth", t, P[path].key))
    return out


def _perturbed():
    return [CompatPair("p1", "text a1 swapped", P["A"], "direction_swap", "instruction", "a1", ""),
            CompatPair("p2", "text b1 cut", P["B"], "truncate", "instruction", "b1", ""),
            CompatPair("p3", "text b2 cut", P["B"], "truncate", "instruction", "b2", ""),
            CompatPair("p4", "text a2", DETOUR, "detour", "trajectory", "a2", P["A"].key)]


def test_mix_2_1_1_and_identity_of_pairs():
    clean, pert = _clean(), _perturbed()
    s = MixSampler(clean, pert, batch_size=8, seed=3)
    assert s.counts() == (4, 2, 2)
    by_id = {p.episode_id: p for p in clean + pert}
    kinds = Counter()
    for epoch in range(30):
        for batch in s.epoch(epoch):
            fams = [it.family for it in batch]
            assert fams == ["ground_truth"] * 4 + ["instruction"] * 2 + ["trajectory"] * 2
            for it in batch:
                assert by_id[it.instruction.episode_id] is it.instruction and by_id[it.trajectory.episode_id] is it.trajectory
                if it.family == "ground_truth":
                    # a paraphrase positive: any clean instruction of the trajectory's own path
                    assert it.label == 1 and it.instruction.kind == CLEAN and it.instruction.path.key == it.trajectory.path.key
                else:
                    assert it.label == 0 and it.instruction is it.trajectory and it.kind == it.trajectory.kind
                    kinds[it.kind] += 1
    # kinds are drawn uniformly within a family (truncate has two episodes, direction_swap one)
    assert kinds["detour"] == 30 * 1 * 2
    assert abs(kinds["direction_swap"] - kinds["truncate"]) < 0.2 * kinds["truncate"]


def test_ground_truth_walks_every_clean_episode_and_paraphrases_vary():
    s = MixSampler(_clean(), _perturbed(), batch_size=4, seed=0, mix=(2, 1, 1))
    assert s.counts() == (2, 1, 1) and s.batches_per_epoch() == 3
    seen, texts = [], Counter()
    for epoch in range(40):
        ep = [it.trajectory.episode_id for b in s.epoch(epoch) for it in b if it.family == "ground_truth"]
        assert sorted(ep) == sorted(p.episode_id for p in _clean())  # each clean episode once per epoch
        seen += ep
        texts.update(it.instruction.episode_id for b in s.epoch(epoch) for it in b
                     if it.family == "ground_truth" and it.trajectory.episode_id == "a1")
    assert set(texts) == {"a1", "a2", "a3"}  # the alternatives of path A all appear as its positives


def test_seeded_and_epoch_dependent():
    a = MixSampler(_clean(), _perturbed(), 8, seed=1).epoch(2)
    b = MixSampler(_clean(), _perturbed(), 8, seed=1).epoch(2)
    c = MixSampler(_clean(), _perturbed(), 8, seed=1).epoch(3)
    ids = lambda e: [(it.instruction.episode_id, it.trajectory.episode_id) for bt in e for it in bt]  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)


@pytest.mark.parametrize("kw,match", [(dict(batch_size=6), "does not split"), (dict(batch_size=8, mix=(2, 1, 1, 1)), "three"),
                                      (dict(batch_size=8, mix=(0, 1, 1)), "ground truth")])
def test_sampler_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        MixSampler(_clean(), _perturbed(), **kw)


def test_missing_family_is_an_error_unless_weight_zero():
    only_instr = [p for p in _perturbed() if p.family == "instruction"]
    with pytest.raises(ValueError, match="no trajectory-perturbed"):
        MixSampler(_clean(), only_instr, 8)
    s = MixSampler(_clean(), only_instr, 6, mix=(2, 1, 0))
    assert s.counts() == (4, 2, 0)


def test_exclusion_matrix():
    clean, pert = _clean(), _perturbed()
    s = MixSampler(clean, pert, 4)
    from ivln_ce.fidelity.compat_data import TrainItem

    items = [TrainItem(clean[0], clean[1], "ground_truth", CLEAN),  # text a1 on path A (episode a2's)
             TrainItem(clean[3], clean[3], "ground_truth", CLEAN),  # b1 on B
             TrainItem(pert[0], pert[0], "instruction", "direction_swap"),  # changed text on A
             TrainItem(pert[3], pert[3], "trajectory", "detour")]  # text a2 (describes A) on the detour
    ex = exclusion_matrix(items)
    expected = [[False, False, True, False],  # text a1 also matches item 2's trajectory (path A)
                [False, False, False, False],
                [False, False, False, False],  # a changed text describes nothing
                [True, False, True, False]]  # text a2 matches path A of items 0 and 2
    assert ex.tolist() == expected
    assert s.counts() == (2, 1, 1)
