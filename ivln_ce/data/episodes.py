"""R2R-VLN-CE episode files (``{split}.json.gz``): strict reading, validation, writing.

Ids are cast to strings on load (every other file keys episodes by the string form) and
written back as integers when they are decimal, so an official file round-trips to the
same JSON text. Validation collects every problem and reports each with the file, the
episode id and the field. Unknown episode keys are kept in ``extra`` with a warning
instead of failing (SPEC §1.2, defect R8). The optional ``instruction_alignment`` (which
words describe which part of the reference path, ``data/alignment.py``) is checked against the
episode's tokens and path and kept as a typed ``Episode.alignment``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from ivln_ce.geometry import quaternion_problem, quaternion_to_heading
from ivln_ce.data.alignment import ALIGNMENT_KEY, AlignmentProblem, InstructionAlignment, parse_alignment
from ivln_ce.data.jsonio import INT_MAX, INT_MIN, DataFormatError, describe, read_json, short_repr, write_json
from ivln_ce.data.vocab import PAD_INDEX, Vocabulary

REQUIRED_KEYS = (
    "episode_id",
    "trajectory_id",
    "scene_id",
    "start_position",
    "start_rotation",
    "info",
    "goals",
    "instruction",
    "reference_path",
)
#: fields of a joined (R4R) episode (``data/r4r.py``): the two source paths and instructions,
#: the distance from the first path's end to the second's start and how it was measured
R4R_KEYS = ("first_path_id", "second_path_id", "first_episode_id", "second_episode_id", "join_distance", "distance_type")
R4R_DISTANCE_TYPES = ("geodesic", "euclidean")
#: a perturbed episode's record (``data/perturb.py``): ``{kind, source_episode_id,
#: source_trajectory_id, detail}``; the kind is any non-empty name, the detail any object
PERTURBATION_KEY = "perturbation"
OPTIONAL_KEYS = ("tour_id", "start_room", "shortest_paths", ALIGNMENT_KEY, *R4R_KEYS, PERTURBATION_KEY)
#: how many problems an error message lists before summarising the rest
MAX_LISTED_PROBLEMS = 20


class EpisodeFormatError(DataFormatError):
    """An episode file is malformed; ``problems`` holds one message per defect."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        listed = problems[:MAX_LISTED_PROBLEMS]
        more = len(problems) - len(listed)
        text = f"{path}: {len(problems)} problem(s) in episode file:\n  " + "\n  ".join(listed)
        if more:
            text += f"\n  ... and {more} more"
        super().__init__(text)


def scan_name(scene_id: str) -> str:
    """``mp3d/zsNo4HB9uLZ/zsNo4HB9uLZ.glb`` -> ``zsNo4HB9uLZ``."""
    base = scene_id.replace("\\", "/").rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[0] if "." in base else base


@dataclass
class Goal:
    position: list[float]
    radius: float


@dataclass
class Episode:
    episode_id: str
    trajectory_id: str
    scene_id: str
    start_position: list[float]
    start_rotation: list[float]
    info: dict[str, Any]
    goals: list[Goal]
    instruction_text: str
    instruction_tokens: list[int]
    reference_path: list[list[float]]
    #: unknown or optional keys, in file order (``tour_id`` lives here when present)
    extra: dict[str, Any] = field(default_factory=dict)
    #: which words describe which part of ``reference_path`` (optional; ``data/alignment.py``)
    alignment: InstructionAlignment | None = None

    @property
    def scan(self) -> str:
        return scan_name(self.scene_id)

    @property
    def goal_position(self) -> list[float]:
        return self.goals[0].position

    @property
    def geodesic_distance(self) -> float:
        return float(self.info["geodesic_distance"])

    @property
    def start_heading(self) -> float:
        return quaternion_to_heading(self.start_rotation)

    @property
    def instruction_length(self) -> int:
        """Effective token count (non-padding ids; padding is trailing by validation)."""
        return sum(1 for t in self.instruction_tokens if t != PAD_INDEX)

    def to_json_dict(self) -> dict[str, Any]:
        """The episode as the official file stores it (key order included)."""
        out = {
            "episode_id": id_to_json(self.episode_id),
            "trajectory_id": id_to_json(self.trajectory_id),
            "scene_id": self.scene_id,
            "start_position": self.start_position,
            "start_rotation": self.start_rotation,
            "info": self.info,
            "goals": [{"position": g.position, "radius": g.radius} for g in self.goals],
            "instruction": {
                "instruction_text": self.instruction_text,
                "instruction_tokens": self.instruction_tokens,
            },
            "reference_path": self.reference_path,
        }
        if self.alignment is not None:
            out[ALIGNMENT_KEY] = self.alignment.to_json()
        out.update(self.extra)
        return out


def id_to_json(value: str) -> int | str:
    """An id as the files store it: an integer when it is a plain ASCII decimal number within the
    64-bit range the readers take (``'²'`` is a digit to ``str.isdigit`` but no number)."""
    if value.isascii() and value.isdigit() and len(value) <= 20 and str(int(value)) == value and int(value) < 1 << 64:
        return int(value)
    return value


@dataclass
class EpisodeDataset:
    """The content of one episode file."""

    episodes: list[Episode]
    #: the file's ``instruction_vocab`` object, kept verbatim for writing back
    instruction_vocab: dict[str, Any] | None = None
    path: str | None = None
    _by_id: dict[str, Episode] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_id = {e.episode_id: e for e in self.episodes}

    @property
    def vocab(self) -> Vocabulary | None:
        if self.instruction_vocab is None:
            return None
        return Vocabulary(list(self.instruction_vocab["word_list"]))

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[Episode]:
        return iter(self.episodes)

    def __getitem__(self, episode_id: str) -> Episode:
        return self._by_id[str(episode_id)]

    def __contains__(self, episode_id: object) -> bool:
        return str(episode_id) in self._by_id

    def scans(self) -> list[str]:
        """Scan names in order of first appearance."""
        return list(dict.fromkeys(e.scan for e in self.episodes))

    def by_scan(self) -> dict[str, list[Episode]]:
        out: dict[str, list[Episode]] = {}
        for e in self.episodes:
            out.setdefault(e.scan, []).append(e)
        return out

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"episodes": [e.to_json_dict() for e in self.episodes]}
        if self.instruction_vocab is not None:
            out["instruction_vocab"] = self.instruction_vocab
        return out

    def write(self, path: str | Path) -> None:
        """Write atomically in the official layout (gzip when the name ends in .gz)."""
        write_json(path, self.to_json_dict())


# --------------------------------------------------------------------------- validation


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _vector_problem(v: Any, n: int) -> str | None:
    if not isinstance(v, list) or len(v) != n:
        return f"expected a list of {n} numbers, got {_describe(v)}"
    if not all(_is_number(x) for x in v):
        return f"expected {n} finite numbers, got {short_repr(v)}"
    return None


_describe = describe


def _id_problem(v: Any) -> str | None:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        return f"expected an integer (or string) id, got {_describe(v)}"
    if isinstance(v, str) and not v:
        return "expected a non-empty id"
    if isinstance(v, int) and not INT_MIN <= v < INT_MAX:
        return f"expected an id within the 64-bit range, got {v}"
    return None


class _Checker:
    def __init__(self, path: str, vocab_size: int | None, known_scans: set[str] | None):
        self.path = path
        self.vocab_size = vocab_size
        self.known_scans = known_scans
        self.problems: list[str] = []
        self.unknown_keys: dict[str, int] = {}
        self.padded_length: int | None = None

    def add(self, where: str, field_name: str, message: str) -> None:
        self.problems.append(f"episode {where}, field '{field_name}': {message}")

    def episode(self, index: int, raw: Any) -> Episode | None:
        if not isinstance(raw, dict):
            self.problems.append(f"episodes[{index}]: expected an object, got {_describe(raw)}")
            return None
        eid = raw.get("episode_id")
        where = f"{short_repr(eid)} (episodes[{index}])" if eid is not None else f"episodes[{index}]"
        start = len(self.problems)
        for key in REQUIRED_KEYS:
            if key not in raw:
                self.add(where, key, "missing")
        for key in raw:
            if key not in REQUIRED_KEYS and key not in OPTIONAL_KEYS:
                self.unknown_keys[key] = self.unknown_keys.get(key, 0) + 1
        if len(self.problems) > start:
            return None

        for key in ("episode_id", "trajectory_id"):
            p = _id_problem(raw[key])
            if p:
                self.add(where, key, p)
        scene = raw["scene_id"]
        if not isinstance(scene, str) or not scene.endswith(".glb") or not scan_name(scene):
            self.add(where, "scene_id", f"expected a path like 'mp3d/SCAN/SCAN.glb', got {_describe(scene)}")
        elif self.known_scans is not None and scan_name(scene) not in self.known_scans:
            self.add(where, "scene_id", f"unknown scene '{scan_name(scene)}' (not among the {len(self.known_scans)} known scenes)")
        p = _vector_problem(raw["start_position"], 3)
        if p:
            self.add(where, "start_position", p)
        q = raw["start_rotation"]
        p = _vector_problem(q, 4) or quaternion_problem(q)
        if p:
            self.add(where, "start_rotation", f"bad quaternion [x, y, z, w]: {p}")
        info = raw["info"]
        if not isinstance(info, dict) or "geodesic_distance" not in info:
            self.add(where, "info.geodesic_distance", "missing")
        elif not _is_number(info["geodesic_distance"]) or info["geodesic_distance"] < 0:
            self.add(where, "info.geodesic_distance", f"expected a finite distance >= 0, got {_describe(info['geodesic_distance'])}")
        goals = self._goals(where, raw["goals"])
        instruction = raw["instruction"]
        text, tokens = self._instruction(where, instruction)
        self._r4r_fields(where, raw)
        self._perturbation(where, raw)
        ref = raw["reference_path"]
        if not isinstance(ref, list) or not ref:
            self.add(where, "reference_path", f"expected a non-empty list of [x, y, z], got {_describe(ref)}")
        else:
            for k, point in enumerate(ref):
                p = _vector_problem(point, 3)
                if p:
                    self.add(where, f"reference_path[{k}]", p)
                    break
        if len(self.problems) > start:
            return None
        alignment = None
        if ALIGNMENT_KEY in raw:
            n_tokens = sum(1 for t in tokens if t != PAD_INDEX)
            try:
                alignment = parse_alignment(raw[ALIGNMENT_KEY], n_tokens, len(ref))
            except AlignmentProblem as exc:
                self.add(where, f"{ALIGNMENT_KEY}{exc.where}", exc.message)
                return None
        extra = {k: v for k, v in raw.items() if k not in REQUIRED_KEYS and k != ALIGNMENT_KEY}
        return Episode(
            episode_id=str(raw["episode_id"]),
            trajectory_id=str(raw["trajectory_id"]),
            scene_id=scene,
            start_position=raw["start_position"],
            start_rotation=q,
            info=info,
            goals=goals,
            instruction_text=text,
            instruction_tokens=tokens,
            reference_path=ref,
            extra=extra,
            alignment=alignment,
        )

    def _r4r_fields(self, where: str, raw: dict) -> None:
        for key in ("first_path_id", "second_path_id", "first_episode_id", "second_episode_id"):
            if key in raw:
                p = _id_problem(raw[key])
                if p:
                    self.add(where, key, p)
        if "join_distance" in raw and (not _is_number(raw["join_distance"]) or raw["join_distance"] < 0):
            self.add(where, "join_distance", f"expected a finite distance >= 0 (metres), got {_describe(raw['join_distance'])}")
        if "distance_type" in raw and raw["distance_type"] not in R4R_DISTANCE_TYPES:
            self.add(where, "distance_type", f"expected one of {list(R4R_DISTANCE_TYPES)}, got {_describe(raw['distance_type'])}")

    def _perturbation(self, where: str, raw: dict) -> None:
        if PERTURBATION_KEY not in raw:
            return
        rec = raw[PERTURBATION_KEY]
        if not isinstance(rec, dict):
            self.add(where, PERTURBATION_KEY, f"expected an object, got {_describe(rec)}")
            return
        kind = rec.get("kind")
        if not isinstance(kind, str) or not kind:
            self.add(where, f"{PERTURBATION_KEY}.kind", f"expected a non-empty name, got {_describe(kind)}")
        for key in ("source_episode_id", "source_trajectory_id"):
            if key not in rec:
                self.add(where, f"{PERTURBATION_KEY}.{key}", "missing")
            else:
                p = _id_problem(rec[key])
                if p:
                    self.add(where, f"{PERTURBATION_KEY}.{key}", p)
        if "detail" in rec and not isinstance(rec["detail"], dict):
            self.add(where, f"{PERTURBATION_KEY}.detail", f"expected an object, got {_describe(rec['detail'])}")
        extra = sorted(set(rec) - {"kind", "source_episode_id", "source_trajectory_id", "detail"})
        if extra:
            self.add(where, PERTURBATION_KEY, f"unexpected keys {extra}")

    def _goals(self, where: str, goals: Any) -> list[Goal]:
        if not isinstance(goals, list) or len(goals) != 1:
            self.add(where, "goals", f"expected exactly one goal, got {_describe(goals)}")
            return []
        g = goals[0]
        if not isinstance(g, dict) or "position" not in g or "radius" not in g:
            self.add(where, "goals[0]", "expected an object with 'position' and 'radius'")
            return []
        p = _vector_problem(g["position"], 3)
        if p:
            self.add(where, "goals[0].position", p)
        if not _is_number(g["radius"]) or g["radius"] < 0:
            self.add(where, "goals[0].radius", f"expected a finite radius >= 0 (metres), got {_describe(g['radius'])}")
        return [Goal(position=g["position"], radius=g["radius"])]

    def _instruction(self, where: str, ins: Any) -> tuple[str, list[int]]:
        if not isinstance(ins, dict):
            self.add(where, "instruction", f"expected an object, got {_describe(ins)}")
            return "", []
        for key in ("instruction_text", "instruction_tokens"):
            if key not in ins:
                self.add(where, f"instruction.{key}", "missing")
        extra_keys = sorted(set(ins) - {"instruction_text", "instruction_tokens"})
        if extra_keys:
            self.add(where, "instruction", f"unexpected keys {extra_keys}")
        if "instruction_text" not in ins or "instruction_tokens" not in ins:
            return "", []
        text, tokens = ins["instruction_text"], ins["instruction_tokens"]
        if not isinstance(text, str):
            self.add(where, "instruction.instruction_text", f"expected a string, got {_describe(text)}")
            text = ""
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            bad = tokens if not isinstance(tokens, list) else next(t for t in tokens if not isinstance(t, int) or isinstance(t, bool))
            self.add(where, "instruction.instruction_tokens", f"expected a list of integer token ids, got {_describe(bad)}")
            return text, []
        negative = [t for t in tokens if t < 0]
        if negative:
            self.add(where, "instruction.instruction_tokens", f"negative token ids {negative[:5]}")
        elif self.vocab_size is not None:
            bad = [t for t in tokens if not 0 <= t < self.vocab_size]
            if bad:
                self.add(where, "instruction.instruction_tokens", f"ids {bad[:5]} outside the vocabulary of {self.vocab_size} words")
        end = len(tokens)
        while end and tokens[end - 1] == PAD_INDEX:
            end -= 1
        if PAD_INDEX in tokens[:end]:
            self.add(where, "instruction.instruction_tokens", "padding (0) inside the instruction; padding must be trailing")
        if self.padded_length is None:
            self.padded_length = len(tokens)
        elif len(tokens) != self.padded_length:
            self.add(where, "instruction.instruction_tokens", f"padded length {len(tokens)} differs from the file's {self.padded_length}")
        return text, tokens


def parse_episodes(
    raw: Any,
    path: str = "<memory>",
    known_scans: Iterable[str] | None = None,
) -> EpisodeDataset:
    """Validate the decoded JSON of an episode file and build the dataset."""
    if not isinstance(raw, dict) or "episodes" not in raw:
        raise EpisodeFormatError(path, ["top level: expected an object with an 'episodes' list"])
    if not isinstance(raw["episodes"], list):
        raise EpisodeFormatError(path, [f"'episodes': expected a list, got {_describe(raw['episodes'])}"])
    vocab_raw = raw.get("instruction_vocab")
    vocab_size = None
    if vocab_raw is not None:
        words = vocab_raw.get("word_list") if isinstance(vocab_raw, dict) else None
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise EpisodeFormatError(path, ["instruction_vocab.word_list: expected a list of strings"])
        try:
            Vocabulary(list(words))
        except ValueError as exc:
            raise EpisodeFormatError(path, [f"instruction_vocab.word_list: {exc}"]) from exc
        vocab_size = len(words)
    checker = _Checker(path, vocab_size, set(known_scans) if known_scans is not None else None)
    episodes = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw["episodes"]):
        ep = checker.episode(i, item)
        if ep is None:
            continue
        if ep.episode_id in seen:
            checker.add(
                f"{ep.episode_id!r} (episodes[{i}])",
                "episode_id",
                f"duplicate id, first used by episodes[{seen[ep.episode_id]}]",
            )
            continue
        seen[ep.episode_id] = i
        episodes.append(ep)
    if checker.problems:
        raise EpisodeFormatError(path, checker.problems)
    if checker.unknown_keys:
        keys = ", ".join(f"'{k}' ({n}x)" for k, n in sorted(checker.unknown_keys.items()))
        warnings.warn(f"{path}: unknown episode keys kept as extras: {keys}", stacklevel=2)
    return EpisodeDataset(episodes=episodes, instruction_vocab=vocab_raw, path=path)


def load_episodes(path: str | Path, known_scans: Iterable[str] | None = None) -> EpisodeDataset:
    """Read and validate an R2R-VLN-CE episode file (``.json`` or ``.json.gz``)."""
    return parse_episodes(read_json(path), str(path), known_scans)


# --------------------------------------------------------------------------- reference trajectories


@dataclass
class ReferenceTrajectory:
    """One entry of ``{split}_gt.json.gz``: the expert rollout used by per-episode nDTW."""

    locations: list[list[float]]
    actions: list[int] | None = None
    forward_steps: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"locations": self.locations}
        if self.actions is not None:
            out["actions"] = self.actions
        if self.forward_steps is not None:
            out["forward_steps"] = self.forward_steps
        out.update(self.extra)
        return out


def parse_reference_trajectories(raw: Any, path: str = "<memory>") -> dict[str, ReferenceTrajectory]:
    if not isinstance(raw, dict):
        raise EpisodeFormatError(path, ["top level: expected an object keyed by episode id"])
    out: dict[str, ReferenceTrajectory] = {}
    problems: list[str] = []
    for eid, value in raw.items():
        if not isinstance(value, dict) or "locations" not in value:
            problems.append(f"episode {eid!r}, field 'locations': missing" + ("" if isinstance(value, dict) else f" (got {_describe(value)})"))
            continue
        locs = value["locations"]
        if not isinstance(locs, list) or not locs:
            problems.append(f"episode {eid!r}, field 'locations': expected a non-empty list of [x, y, z]")
            continue
        bad = next((k for k, p in enumerate(locs) if _vector_problem(p, 3)), None)
        if bad is not None:
            problems.append(f"episode {eid!r}, field 'locations[{bad}]': {_vector_problem(locs[bad], 3)}")
            continue
        actions = value.get("actions")
        if actions is not None and not (
            isinstance(actions, list) and all(isinstance(a, int) and not isinstance(a, bool) and 0 <= a <= 3 for a in actions)
        ):
            problems.append(f"episode {eid!r}, field 'actions': expected a list of action ids 0-3")
            continue
        steps = value.get("forward_steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps < INT_MAX):
            problems.append(f"episode {eid!r}, field 'forward_steps': expected a count >= 0, got {_describe(steps)}")
            continue
        extra = {k: v for k, v in value.items() if k not in ("locations", "actions", "forward_steps")}
        out[str(eid)] = ReferenceTrajectory(locs, actions, value.get("forward_steps"), extra)
    if problems:
        raise EpisodeFormatError(path, problems)
    return out


def load_reference_trajectories(path: str | Path) -> dict[str, ReferenceTrajectory]:
    """Read ``{split}_gt.json.gz`` (episode id -> locations, actions, forward_steps)."""
    return parse_reference_trajectories(read_json(path), str(path))


def write_reference_trajectories(path: str | Path, refs: dict[str, ReferenceTrajectory]) -> None:
    write_json(path, {eid: r.to_json_dict() for eid, r in refs.items()})


def check_against_vocab(dataset: EpisodeDataset, vocab: Vocabulary, limit: int = 5) -> list[str]:
    """Episodes whose stored tokens differ from re-tokenising their text (for new data)."""
    out = []
    for e in dataset.episodes:
        ids = vocab.encode(e.instruction_text, padded_length=len(e.instruction_tokens))
        if ids != e.instruction_tokens:
            out.append(e.episode_id)
            if len(out) >= limit:
                break
    return out


def sorted_ids(ids: Sequence[str]) -> list[str]:
    """Episode ids in numeric order when they are numbers, else lexicographic."""
    return sorted(ids, key=lambda s: (0, int(s), "") if s.isdigit() else (1, 0, s))
