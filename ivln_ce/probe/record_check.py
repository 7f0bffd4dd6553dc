"""The schema of a ``probe run`` record, checked field by field wherever records are read back.

A record (one probe, one condition; ``run.condition_record`` writes it) reaches Scores, mixed
models, figures and the report only through ``check_record`` and ``check_probe_records``: each
field has a type and a range (probabilities finite and in [0, 1], a distribution of four that
sums to 1, the grounding mass equal to the distribution's mass on the grounding actions, actions
in range, ids plain names, distances and angles finite and bounded, so no figure's bins can be
made to number millions), and the records of one probe must be exactly its skill's conditions,
agreeing on the probe's fields. Every refusal is a ``RecordError`` naming the file, the record
and the field.

Files of records carry a checksum of their content (``checksum``): a value edited after the run
wrote it is refused (``probe_results.json``) or recomputed (a resume record), never used. The
checksum is not a signature: someone who recomputes it after an edit gets a record that is still
checked field by field and for consistency, but whose plausible values cannot be told from a run's.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

from ivln_ce.data.jsonio import describe
from ivln_ce.fingerprint import digest
from ivln_ce.probe.agent_rollout import MAX_STEPS as MAX_ROLLOUT_STEPS
from ivln_ce.probe.grounding import SECTOR_ACTIONS
from ivln_ce.probe.skills import CONDITIONS, DIRECTION, INTERVENED, OBJECT, ROOM, SECTOR_NAMES, SKILLS, STOP, VARIANTS
from ivln_ce.sim.base import ACTIONS

#: probe ids, as ``compose.probe_id`` writes them: a plain file name, never ``.``/``..`` or a path
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")
#: a distribution sums to 1 within this (the run rounds each probability to 7 decimals)
SUM_TOLERANCE = 1e-5
#: the grounding mass equals the distribution's mass on the grounding actions within this
MASS_TOLERANCE = 1e-5
#: the furthest a truncation point, a teacher walk or a coordinate may reach
MAX_POINT = 100_000
MAX_TEACHER_STEPS = 1_000_000
MAX_COORDINATE = 1e6
#: distances in metres a rollout may report (a house is tens of metres across): bounds the figures' bins
MAX_DISTANCE_M = 500.0
MAX_TEXT = 1000


class RecordError(ValueError):
    """A record does not follow the ``probe run`` record format; the message names file, record, field."""


def checksum(doc: Mapping[str, Any]) -> str:
    """The digest of a record file's content, every key but ``checksum`` itself."""
    return digest({k: v for k, v in doc.items() if k != "checksum"})


def has_valid_checksum(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("checksum"), str) and doc["checksum"] == checksum(doc)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def safe_id(v: Any, where: str, field: str = "probe_id") -> str:
    if not isinstance(v, str) or not SAFE_ID.fullmatch(v):
        raise RecordError(f"{where}: field {field!r} must be a plain probe id (letters, digits, '_', '.', '-'), got {describe(v)}")
    return v


def text(v: Any, where: str, field: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(v, str) or not 0 < len(v) <= limit or "\x00" in v:
        raise RecordError(f"{where}: field {field!r} must be a non-empty string of at most {limit} characters, got {describe(v)}")
    return v


def number(v: Any, where: str, field: str, lo: float, hi: float, null: bool = False) -> float | None:
    if v is None and null:
        return None
    if not is_number(v) or not lo <= v <= hi:
        raise RecordError(f"{where}: field {field!r} must be a finite number in [{lo:g}, {hi:g}]"
                          f"{' or null' if null else ''}, got {describe(v)}")
    return float(v)


def integer(v: Any, where: str, field: str, lo: int, hi: int, null: bool = False) -> int | None:
    if v is None and null:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise RecordError(f"{where}: field {field!r} must be an integer in [{lo}, {hi}]{' or null' if null else ''}, "
                          f"got {describe(v)}")
    return v


def boolean(v: Any, where: str, field: str, null: bool = False) -> bool | None:
    if v is None and null:
        return None
    if not isinstance(v, bool):
        raise RecordError(f"{where}: field {field!r} must be true or false{' or null' if null else ''}, got {describe(v)}")
    return v


def vector(v: Any, where: str, field: str, n: int = 3, bound: float = MAX_COORDINATE) -> list[float]:
    if not isinstance(v, list) or len(v) != n or not all(is_number(x) and abs(x) <= bound for x in v):
        raise RecordError(f"{where}: field {field!r} must be a list of {n} finite numbers within ±{bound:g}, got {describe(v)}")
    return [float(x) for x in v]


def distribution(v: Any, where: str, field: str = "distribution") -> list[float]:
    """Four finite probabilities in [0, 1] summing to 1 (within ``SUM_TOLERANCE``)."""
    if not isinstance(v, list) or len(v) != len(ACTIONS) or not all(is_number(x) and 0.0 <= x <= 1.0 for x in v):
        raise RecordError(f"{where}: field {field!r} must be a list of {len(ACTIONS)} finite probabilities in [0, 1], "
                          f"got {describe(v)}")
    if abs(math.fsum(v) - 1.0) > SUM_TOLERANCE:
        raise RecordError(f"{where}: field {field!r} sums to {math.fsum(v):.8g}, not 1 (within {SUM_TOLERANCE:g})")
    return [float(x) for x in v]


# --------------------------------------------------------------------------- rollouts

_ANGLE = (-180.0, 180.0)
_ERROR = (0.0, 180.0)
_DIST = (0.0, MAX_DISTANCE_M)
#: rollout field -> (kind, range, null allowed); kind "n" number, "i" integer, "b" boolean
ROLLOUT_SCHEMA: dict[str, tuple[str, tuple[float, float] | None, bool]] = {
    "steps": ("i", (0, MAX_ROLLOUT_STEPS), False),
    "stopped": ("b", None, False),
    "stop_step": ("i", (0, MAX_ROLLOUT_STEPS), True),
    "collisions": ("i", (0, MAX_ROLLOUT_STEPS), False),
    "heading_change_deg": ("n", _ANGLE, False),
    "turned_deg": ("n", (-180.0 * MAX_ROLLOUT_STEPS, 180.0 * MAX_ROLLOUT_STEPS), True),
    "displacement_m": ("n", _DIST, True),
    "displacement_heading_deg": ("n", _ANGLE, True),
    "path_length_m": ("n", (0.0, 10 * MAX_DISTANCE_M), True),
    "end_heading": ("n", (-1e4, 1e4), False),
    "final_in_sector": ("b", None, True),
    "sector_error_deg": ("n", _ERROR, True),
    "displacement_in_sector": ("b", None, True),
    "object_error_start_deg": ("n", _ERROR, True),
    "object_error_deg": ("n", _ERROR, True),
    "object_distance_start_m": ("n", _DIST, True),
    "object_distance_m": ("n", _DIST, True),
    "d_geo_start": ("n", _DIST, True),
    "d_geo_end": ("n", _DIST, True),
    "delta_d": ("n", (-MAX_DISTANCE_M, MAX_DISTANCE_M), True),
    "in_target_room": ("b", None, False),
}
_ROLLOUT_OTHER = {"actions", "end_position"}
#: the fields each skill's rollout must have (``rollout_measures.measure_rollout`` writes them)
ROLLOUT_NEEDS = {"": ("steps", "stopped", "heading_change_deg", "displacement_m"),
                 DIRECTION: ("final_in_sector", "sector_error_deg"), OBJECT: ("object_error_deg", "object_distance_m"),
                 ROOM: ("delta_d", "d_geo_end")}


def check_rollout(raw: Any, skill: str, where: str) -> dict[str, Any]:
    """A record's ``rollout`` object, every field typed and in range; RecordError otherwise."""
    if not isinstance(raw, dict):
        raise RecordError(f"{where}: field 'rollout' must be an object, got {describe(raw)}")
    unknown = sorted(set(raw) - set(ROLLOUT_SCHEMA) - _ROLLOUT_OTHER)
    if unknown:
        raise RecordError(f"{where}: field 'rollout' has unknown keys {unknown[:5]}")
    for key in (*ROLLOUT_NEEDS[""], *ROLLOUT_NEEDS.get(skill, ())):
        if key not in raw:
            raise RecordError(f"{where}: field 'rollout.{key}' is missing")
    for key, (kind, rng, null) in ROLLOUT_SCHEMA.items():
        if key not in raw:
            continue
        name = f"rollout.{key}"
        if kind == "b":
            boolean(raw[key], where, name, null)
        elif kind == "i":
            integer(raw[key], where, name, int(rng[0]), int(rng[1]), null)
        else:
            number(raw[key], where, name, rng[0], rng[1], null)
    acts = raw.get("actions", [])
    if (not isinstance(acts, list) or len(acts) > raw["steps"]
            or not all(isinstance(a, int) and not isinstance(a, bool) and 0 < a < len(ACTIONS) for a in acts)):
        raise RecordError(f"{where}: field 'rollout.actions' must list at most 'rollout.steps' ({raw['steps']}) actions, "
                          f"each an integer in [1, {len(ACTIONS) - 1}] (STOP is not listed), got {describe(acts)}")
    if "end_position" in raw:
        vector(raw["end_position"], where, "rollout.end_position")
    return raw


# --------------------------------------------------------------------------- records


def check_record(r: Any, where: str) -> dict[str, Any]:
    """One record, every field typed and in range, its grounding mass consistent with its
    distribution; RecordError naming ``where`` and the field otherwise."""
    if not isinstance(r, dict):
        raise RecordError(f"{where}: expected an object, got {describe(r)}")
    pid = safe_id(r.get("probe_id"), where)
    skill = r.get("skill")
    if skill not in SKILLS:
        raise RecordError(f"{where}: field 'skill' must be one of {list(SKILLS)}, got {describe(skill)}")
    if pid.split("-", 1)[0] != skill:
        raise RecordError(f"{where}: field 'probe_id' {pid!r} is not the id of a {skill} probe")
    cond = r.get("condition")
    if cond not in CONDITIONS[skill]:
        raise RecordError(f"{where}: field 'condition' must be one of {list(CONDITIONS[skill])} (skill {skill}), got {describe(cond)}")
    if r.get("episode_id") != f"{pid}.{cond}":
        raise RecordError(f"{where}: field 'episode_id' must be {pid}.{cond} (the probe's episode of that condition), "
                          f"got {describe(r.get('episode_id'))}")
    if r.get("intervened") is not (cond == INTERVENED[skill]):
        raise RecordError(f"{where}: field 'intervened' must be {cond == INTERVENED[skill]} for condition {cond!r}, "
                          f"got {describe(r.get('intervened'))}")
    sector = r.get("target_sector")
    if skill == DIRECTION and sector not in SECTOR_NAMES or skill != DIRECTION and sector is not None:
        raise RecordError(f"{where}: field 'target_sector' must be " + (f"one of {list(SECTOR_NAMES)}" if skill == DIRECTION
                          else "null") + f" for a {skill} probe, got {describe(sector)}")
    if "variant" in r:
        variant = r["variant"]
        if (variant is not None or VARIANTS[skill]) and variant not in VARIANTS[skill]:
            raise RecordError(f"{where}: field 'variant' must be one of {list(VARIANTS[skill]) or [None]} for a {skill} "
                              f"probe, got {describe(variant)}")
        if skill == DIRECTION and variant != sector:
            raise RecordError(f"{where}: field 'variant' ({variant!r}) must be the target sector ({sector!r})")
    text(r.get("scene_id"), where, "scene_id")
    text(r.get("source_episode"), where, "source_episode")
    integer(r.get("point"), where, "point", 1, MAX_POINT)
    dist = distribution(r.get("distribution"), where)
    correct = r.get("correct_actions")
    if (not isinstance(correct, list) or not 0 < len(correct) <= len(ACTIONS) or len(set(map(str, correct))) != len(correct)
            or not all(isinstance(a, str) and a in ACTIONS for a in correct)):
        raise RecordError(f"{where}: field 'correct_actions' must list distinct action names of {list(ACTIONS)}, got {describe(correct)}")
    expected = {STOP: [ACTIONS[0]], DIRECTION: [ACTIONS[a] for a in SECTOR_ACTIONS.get(sector, ())]}.get(skill)
    if expected is not None and sorted(correct) != sorted(expected):
        raise RecordError(f"{where}: field 'correct_actions' must be {expected} for a {skill} probe"
                          + (f" of sector {sector}" if skill == DIRECTION else "") + f", got {correct}")
    mass = number(r.get("correct_mass"), where, "correct_mass", 0.0, 1.0)
    implied = math.fsum(dist[ACTIONS.index(a)] for a in correct)
    if abs(mass - implied) > MASS_TOLERANCE:
        raise RecordError(f"{where}: field 'correct_mass' is {mass:.8g}, but the distribution puts {implied:.8g} on "
                          f"{correct}: the record is inconsistent")
    integer(r.get("teacher_steps"), where, "teacher_steps", 0, MAX_TEACHER_STEPS)
    vector(r.get("position"), where, "position")
    number(r.get("distance_to_point"), where, "distance_to_point", 0.0, MAX_COORDINATE)
    number(r.get("heading_error_deg"), where, "heading_error_deg", 0.0, 180.0, null=True)
    if "rollout" in r:
        check_rollout(r["rollout"], skill, where)
    return r


#: the fields every condition of one probe shares
SHARED_FIELDS = ("skill", "scene_id", "source_episode", "point", "target_sector", "variant", "correct_actions")


def check_probe_records(records: Sequence[dict], where: str) -> None:
    """Checked records (``check_record``) grouped per probe: each probe has every condition of its
    skill exactly once, and its conditions agree on the probe's fields. ``where(i)`` names record i."""
    first: dict[str, int] = {}
    seen: dict[str, set[str]] = {}
    for i, r in enumerate(records):
        pid = r["probe_id"]
        if pid not in first:
            first[pid], seen[pid] = i, set()
        elif r["condition"] in seen[pid]:
            raise RecordError(f"{where}: records[{i}]: probe {pid} condition {r['condition']!r} is recorded twice")
        else:
            other = records[first[pid]]
            for key in SHARED_FIELDS:
                if r.get(key) != other.get(key):
                    raise RecordError(f"{where}: records[{i}]: field {key!r} ({describe(r.get(key))}) differs from "
                                      f"records[{first[pid]}] of the same probe {pid} ({describe(other.get(key))})")
        seen[pid].add(r["condition"])
    for pid, conds in seen.items():
        skill = records[first[pid]]["skill"]
        missing = [c for c in CONDITIONS[skill] if c not in conds]
        if missing:
            raise RecordError(f"{where}: probe {pid} has no record of condition(s) {missing}: a run records every "
                              f"condition of a probe at once, so records are missing or were removed")
    rolled = {pid for pid in seen if "rollout" in records[first[pid]]}
    for i, r in enumerate(records):
        if (r["probe_id"] in rolled) != ("rollout" in r):
            raise RecordError(f"{where}: records[{i}]: probe {r['probe_id']} has a rollout in some conditions only")


def check_skipped(raw: Any, where: str) -> dict[str, str]:
    """``skipped``: probe id -> why it was skipped."""
    if not isinstance(raw, dict):
        raise RecordError(f"{where}: field 'skipped' must be an object (probe id -> reason), got {describe(raw)}")
    for k, v in raw.items():
        safe_id(k, where, "skipped")
        text(v, where, f"skipped.{k}", 4000)
    return raw
