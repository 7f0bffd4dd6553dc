"""Random tours with oracle phases, turn duplicates and degenerate blocks, as entry lists."""

import numpy as np


def _block(rng, eid, phase, n, start, repeat_p):
    pts, p = [], start.copy()
    for _ in range(n):
        if pts and rng.random() < repeat_p:
            pts.append(pts[-1].copy())  # turn in place: identical position
        else:
            p = p + np.array([rng.normal(0, 0.3), 0.0, rng.normal(0, 0.3)])
            pts.append(p.round(3))
    return [{"position": [float(v) for v in q], "phase": phase, "episode_id": eid} for q in pts], p


def random_tour(rng, K=None, max_points=7, degenerate=0.2, min_points=1):
    """(agent_entries, target_entries) for one tour with K episodes in the same order."""
    K = K or int(rng.integers(1, 6))
    agent, target = [], []
    pa = pg = np.zeros(3)
    for k in range(K):
        eid = str(100 + k)
        small = rng.random() < degenerate
        n = int(rng.integers(1, 3)) if small else int(rng.integers(min_points, max_points + 1))
        m = int(rng.integers(1, 3)) if rng.random() < degenerate else int(rng.integers(min_points, max_points + 1))
        if k > 0:
            for ent, p, lst in ((agent, pa, 0), (target, pg, 1)):
                blk, _ = _block(rng, eid, "oracle_start", int(rng.integers(0, 3)), p, 0.3)
                ent.extend(blk)
        blk, pa = _block(rng, eid, "agent", n, pa, 0.3)
        agent.extend(blk)
        blk, pg = _block(rng, eid, "agent", m, pg, 0.3)
        target.extend(blk)
        for ent, p in ((agent, pa), (target, pg)):
            blk, _ = _block(rng, eid, "oracle_goal", int(rng.integers(0, 3)), p, 0.3)
            ent.extend(blk)
    return agent, target
