"""Round planning of DAgger collection: the P6 chains, when P6 applies, per-tour seeds."""

from __future__ import annotations

from ivln_ce.data.episodes import Episode, Goal
from ivln_ce.rollout.policy_agent import tour_key
from ivln_ce.training.collect import chained_items, p6_applies, plan_round


def _episodes(per_scan: dict[str, int]) -> list[Episode]:
    out, n = [], 0
    for scan, count in per_scan.items():
        for _ in range(count):
            n += 1
            out.append(Episode(str(n), str(n), f"mp3d/{scan}/{scan}.glb", [0, 0, 0], [0, 0, 0, 1], {}, [Goal([1, 0, 0], 3.0)],
                               "go", [1, 2], [[0, 0, 0], [1, 0, 0]]))
    return out


def test_p6_chains_one_per_worker_grouped_by_scene_and_capped_at_the_update_size():
    eps = _episodes({"A": 7, "B": 5, "C": 6})
    full = chained_items(eps, seed=3, round_=0, chains=1)
    assert len(full) == 1 and sorted(e.episode_id for e in full[0].episodes) == sorted(e.episode_id for e in eps)
    scans = [e.scan for e in full[0].episodes]
    assert sum(1 for a, b in zip(scans, scans[1:]) if a != b) == 2  # scene-grouped: each scene one contiguous block

    chains = chained_items(eps, seed=3, round_=0, chains=4, size=10)
    assert [len(c.episodes) for c in chains] == [3, 3, 3, 1]  # ceil(10 / 4) per chain, 10 in all
    ids = [e.episode_id for c in chains for e in c.episodes]
    assert ids == [e.episode_id for e in full[0].episodes][:10]  # the same order, dealt in contiguous parts
    assert len(set(c.tour.tour_id for c in chains)) == 4
    assert all(c.tour.episode_ids == tuple(e.episode_id for e in c.episodes) for c in chains)
    assert plan_round(chains, 10, 3, 0) and sum(len(chains[i].episodes) for i in plan_round(chains, 10, 3, 0)) == 10
    other = chained_items(eps, seed=3, round_=1, chains=1)
    assert [e.episode_id for e in other[0].episodes] != [e.episode_id for e in full[0].episodes]  # a new order per round


def test_p6_applies_only_to_iterative_map_cma_dagger_fine_tuning_in_the_official_profile():
    assert p6_applies("map_cma", "iterative", itmaps_ft_on_tours=False, p=0.5)
    assert not p6_applies("map_cma", "iterative", itmaps_ft_on_tours=True, p=0.5)  # fixed profile: tours
    assert not p6_applies("map_cma", "iterative", itmaps_ft_on_tours=False, p=1.0)  # teacher forcing: tours
    assert not p6_applies("map_cma", "episodic", itmaps_ft_on_tours=False, p=0.5)
    assert not p6_applies("cma", "iterative", itmaps_ft_on_tours=False, p=0.5)


def test_per_tour_seeds_are_distinct_for_distinct_ids():
    """One key function seeds DAgger collection and sampled evaluation (anagrams included)."""
    ids = [f"ep{i}" for i in range(1, 20001)] + [f"chain{r}.{c}" for r in range(10) for c in range(4)] + ["tour_ab", "tour_ba"]
    keys = [tour_key(t) for t in ids]
    assert len(set(keys)) == len(ids)  # the old character-code sum gave 463 seeds for ep1..ep10819
    assert all(0 <= k < 2**63 for k in keys)
    assert tour_key("42") == 42 and tour_key("ep7") == tour_key("ep7")
