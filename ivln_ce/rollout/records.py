"""Per-tour results assembled from the tour environment's step infos (no torch).

Records are keyed by the episode each value belongs to, as the environment names it
(``metrics_episode_id`` at the agent-done step, ``finished_episode_id`` at the sim-done
step), never by the episode that is current when the info arrives: when a sim episode ends
on the agent-done step itself (no oracle goal walk), the environment has already moved on
to the next episode. ``finish`` checks that exactly the tour's episodes were recorded, in
order, so a misfiled record cannot pass silently.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence


class RecordError(RuntimeError):
    """The environment's infos do not add up to one record per episode of the tour."""


@dataclass
class TourResult:
    tour_index: int
    tour_id: str
    scan: str
    #: episode id -> metrics at the agent-done step, in the tour's episode order
    episodes: dict[str, dict[str, float]]
    #: episode id -> the reference its nDTW used ("gt" or the "reference_path" fallback)
    references: dict[str, str]
    #: episode id -> teleports counted for that episode (failed oracle walks)
    teleports: dict[str, int]
    #: environment steps after the reset (agent and oracle), and agent steps only
    steps: int
    agent_steps: int
    #: the tour's path log (official entries), for t-nDTW
    path: list[dict] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class TourAccumulator:
    """Feed it every info of one tour (the reset's first); ``finish`` gives the TourResult."""

    def __init__(self, tour_index: int, tour_id: str, scan: str, episode_ids: Sequence[str]):
        self.tour_index, self.tour_id, self.scan = tour_index, tour_id, scan
        self.episode_ids = list(episode_ids)
        self.episodes: dict[str, dict] = {}
        self.references: dict[str, str] = {}
        self.teleports: dict[str, int] = {}
        self.steps = 0
        self.agent_steps = 0

    def add(self, info: dict, after_step: bool = True) -> None:
        if after_step:
            self.steps += 1
        if "metrics" in info:
            eid = info["metrics_episode_id"]
            if eid in self.episodes:
                raise RecordError(f"tour {self.tour_id}: episode {eid} reported metrics twice")
            self.episodes[eid] = info["metrics"]
            self.references[eid] = info.get("reference", "gt")
            self.agent_steps += int(info["metrics"].get("steps_taken", 0))
        if info.get("sim_done"):
            self.teleports[info["finished_episode_id"]] = int(info.get("teleports", 0))

    def finish(self, tour_path: list[dict]) -> TourResult:
        if list(self.episodes) != self.episode_ids:
            raise RecordError(
                f"tour {self.tour_id}: recorded episodes {list(self.episodes)} differ from the tour's {self.episode_ids}"
            )
        if list(self.teleports) != self.episode_ids:
            raise RecordError(f"tour {self.tour_id}: sim episodes ended for {list(self.teleports)}, expected {self.episode_ids}")
        return TourResult(self.tour_index, self.tour_id, self.scan, self.episodes, self.references, self.teleports,
                          self.steps, self.agent_steps, tour_path)
