"""Strict, typed experiment configuration.

Configs are dataclasses (OmegaConf structured configs) loaded from YAML files under
``configs/`` plus dotted command-line overrides (``metrics.tndtw.variant=paper``).
Unlike the official yacs set-up, an unknown or misspelled key is an error that names the
key, the file it came from and the closest valid key, so a typo can never silently change
an experiment (official defect E2/P7). A YAML file may start from others with
``_base_: [relative/path.yaml, ...]``; later files and then overrides win.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

BASE_KEY = "_base_"


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message says where and why."""


class TndtwVariant(str, enum.Enum):
    """Which tour-nDTW to compute (SPEC §4.5-4.6)."""

    official = "official"  # the published metric, quirks included
    paper = "paper"  # Eq. 1-2 of the paper


class OnInfeasible(str, enum.Enum):
    """What to do with a tour whose official DTW window admits no warping path (SPEC §4.7)."""

    error = "error"
    nan = "nan"
    paper_fallback = "paper_fallback"


class DistanceKind(str, enum.Enum):
    euclidean = "euclidean"
    geodesic = "geodesic"


@dataclass
class TndtwConfig:
    #: official reproduces the published number; paper follows Eq. 1-2 (SPEC §4.6).
    variant: TndtwVariant = TndtwVariant.official
    #: distance threshold d_th used as the nDTW normaliser (metres).
    d_th: float = 3.0
    #: point distance; the official variant is always Euclidean 3D.
    distance: DistanceKind = DistanceKind.euclidean
    on_infeasible: OnInfeasible = OnInfeasible.error


@dataclass
class MetricsConfig:
    #: success threshold (metres, strict "<" as officially); also the episodic nDTW d_th.
    success_distance: float = 3.0
    tndtw: TndtwConfig = field(default_factory=TndtwConfig)


@dataclass
class DataConfig:
    #: root of all data; the paths below may use {split}.
    root: str = "data"
    split: str = "val_unseen"
    episodes: str = "${data.root}/datasets/R2R_VLNCE_v1-3_preprocessed/{split}/{split}.json.gz"
    reference_trajectories: str = (
        "${data.root}/datasets/R2R_VLNCE_v1-3_preprocessed/{split}/{split}_gt.json.gz"
    )
    embeddings: str = "${data.root}/datasets/R2R_VLNCE_v1-3_preprocessed/embeddings.json.gz"
    tours: str = "${data.root}/tours.json"
    target_paths: str = "${data.root}/gt_ndtw.json"
    scenes_dir: str = "${data.root}/scene_datasets"


class SimBackend(str, enum.Enum):
    embedded = "embedded"  # generated houses, moderngl/embree rendering, grid navigation
    habitat = "habitat"  # habitat-sim 0.2/0.3 (optional extra)


class RendererKind(str, enum.Enum):
    moderngl = "moderngl"
    embree = "embree"
    auto = "auto"  # moderngl, falling back to embree where no EGL context can be made


@dataclass
class SensorConfig:
    width: int = 256
    height: int = 256
    hfov: float = 90.0  # degrees


@dataclass
class SimulatorConfig:
    backend: SimBackend = SimBackend.embedded
    renderer: RendererKind = RendererKind.moderngl
    #: which sensors to render: any of rgb, depth, semantic
    sensors: list[str] = field(default_factory=lambda: ["rgb", "depth", "semantic"])
    rgb: SensorConfig = field(default_factory=lambda: SensorConfig(224, 224, 90.0))
    depth: SensorConfig = field(default_factory=SensorConfig)
    semantic: SensorConfig = field(default_factory=SensorConfig)
    sensor_height: float = 1.25
    max_depth: float = 10.0  # depth is normalised by this and clipped to 1
    forward_step: float = 0.25
    turn_angle: float = 15.0  # degrees
    agent_radius: float = 0.1
    agent_height: float = 1.5
    max_climb: float = 0.2
    nav_cell: float = 0.05  # embedded navigation grid resolution (m)


@dataclass
class EnvConfig:
    """The iterative tour runner (SPEC §3). Each switch documents its official value."""

    #: agent actions per episode, STOP included (official 500)
    max_agent_steps: int = 500
    #: oracle walks between episodes; false teleports to the next start (official: false only
    #: for latent tour-model training)
    oracle_phases: bool = True
    oracle_goal_phase: bool = True
    #: the oracle's goal radius: 0.25 m as published (defect R1); the paper says 0.5 m
    oracle_goal_radius: float = 0.25
    #: oracle steps per phase before it counts as failed and teleports; -1 = unlimited
    #: (official 1000 at evaluation)
    oracle_step_limit: int = 1000
    #: snap exactly onto the start pose after oracle_start, so measures, observations and the
    #: reference agree (official false: the agent starts up to 0.25 m / 7.5 deg off; M11)
    precise_episode_start: bool = True
    #: official true (R2): the reset observation is rendered at the next nominal start while
    #: the agent stands at the previous goal; false renders at the true pose
    reset_obs_at_nominal_start: bool = False
    #: official true (R4): after a teleport the step's observation is not re-rendered
    stale_obs_after_teleport: bool = False
    #: official false (M10): log the pose after the last action of a timed-out episode
    log_final_pose_on_timeout: bool = True
    #: official true (R3): every oracle pose is queried twice, which disables the oracle's
    #: thrashing suppression; false queries once with working suppression
    oracle_double_query: bool = False


class MapMode(str, enum.Enum):
    episodic = "episodic"  # reset at each agent episode (and every oracle step), as the agent mask says
    iterative = "iterative"  # reset at each tour; oracle walks included
    known = "known"  # the precomputed scene map, loaded at each tour start


class SemanticSource(str, enum.Enum):
    gt = "gt"  # the simulator's 13-class labels
    rednet = "rednet"  # a segmenter over RGB-D


class MapBackend(str, enum.Enum):
    auto = "auto"  # numba on CPU, torch on GPU
    torch = "torch"  # vectorised scatter_reduce on any device
    numba = "numba"  # fused single-pass CPU kernels (same output as torch)


@dataclass
class MappingConfig:
    mode: MapMode = MapMode.iterative
    semantics: SemanticSource = SemanticSource.gt
    #: how the world memory is updated and rendered; both backends give the same maps
    backend: MapBackend = MapBackend.auto
    #: side of the square world grid kept per stream, centred where the stream starts (m)
    world_extent: float = 60.0
    world_cell: float = 0.05
    map_size: int = 64
    map_cell: float = 0.1
    known_maps_dir: str = "${data.root}/known_maps"
    #: save per-episode map images during evaluation
    save_images: bool = False


@dataclass
class EvalConfig:
    #: the agent: a reference agent (oracle, random, forward, stop); policies come later
    agent: str = "oracle"
    split: str = "${data.split}"
    #: worker processes on this machine (ignored under torchrun, where ranks shard the tours)
    workers: int = 1
    #: evaluate only these tour ids (t-nDTW is then "partial" and paper-variant only)
    tours: list[str] = field(default_factory=list)
    #: label of the output files (``*_ckpt_{label}_{split}.json``); defaults to the agent name
    label: str = ""
    #: reuse per-tour results already on disk (resume an interrupted run)
    resume: bool = True


@dataclass
class ExperimentConfig:
    name: str = "default"
    seed: int = 100
    results_dir: str = "results/${name}"
    data: DataConfig = field(default_factory=DataConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    simulator: SimulatorConfig = field(default_factory=SimulatorConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    mapping: MappingConfig = field(default_factory=MappingConfig)


# --------------------------------------------------------------------------- key checking


def _schema_fields(schema: Any) -> dict[str, Any]:
    return {f.name: f for f in dataclasses.fields(schema)}


def _field_type(f: dataclasses.Field, schema: type) -> Any:
    import typing

    hints = typing.get_type_hints(schema)
    return hints[f.name]


def _all_paths(schema: type, prefix: str = "") -> list[str]:
    paths = []
    for name, f in _schema_fields(schema).items():
        typ = _field_type(f, schema)
        path = f"{prefix}{name}"
        paths.append(path)
        if dataclasses.is_dataclass(typ):
            paths.extend(_all_paths(typ, path + "."))
    return paths


def closest_key(bad_path: str, schema: type) -> str | None:
    """The valid dotted key most similar to ``bad_path`` (siblings first, then anywhere)."""
    parent, _, leaf = bad_path.rpartition(".")
    candidates = _all_paths(schema)
    siblings = [p for p in candidates if p.rpartition(".")[0] == parent]
    match = difflib.get_close_matches(bad_path, siblings, n=1, cutoff=0.5)
    if match:
        return match[0]
    by_leaf = {p.rpartition(".")[2]: p for p in candidates}
    match = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.6)
    if match:
        return by_leaf[match[0]]
    match = difflib.get_close_matches(bad_path, candidates, n=1, cutoff=0.0)
    return match[0] if match else None


def _check_value(path: str, value: Any, typ: Any, source: str) -> None:
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        allowed = [m.name for m in typ]
        if isinstance(value, typ):
            return
        if not isinstance(value, str) or value not in allowed:
            near = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.0)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise ConfigError(
                f"{source}: '{path}' must be one of {allowed}, got {value!r}{hint}"
            )


def check_keys(
    raw: Mapping[str, Any],
    schema: type,
    source: str,
    prefix: str = "",
    root: type | None = None,
) -> None:
    """Raise ConfigError for the first key of ``raw`` that ``schema`` does not define."""
    root = root or schema
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: '{prefix.rstrip('.') or '<root>'}' must be a mapping")
    fields = _schema_fields(schema)
    for key, value in raw.items():
        path = f"{prefix}{key}"
        if key not in fields:
            near = closest_key(path, root)
            hint = f"; did you mean '{near}'?" if near else ""
            raise ConfigError(f"{source}: unknown config key '{path}'{hint}")
        typ = _field_type(fields[key], schema)
        if dataclasses.is_dataclass(typ):
            if value is not None:
                check_keys(value, typ, source, path + ".", root)
        else:
            _check_value(path, value, typ, source)


# --------------------------------------------------------------------------- loading


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config file must hold a mapping at the top level")
    return raw


def _yaml_chain(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[Path, dict]]:
    """The file and its ``_base_`` ancestors, oldest first."""
    path = path.resolve()
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise ConfigError(f"{path}: circular {BASE_KEY} chain: {chain}")
    raw = _read_yaml(path)
    bases = raw.pop(BASE_KEY, [])
    if isinstance(bases, str):
        bases = [bases]
    out: list[tuple[Path, dict]] = []
    for base in bases:
        out.extend(_yaml_chain((path.parent / base), (*seen, path)))
    out.append((path, raw))
    return out


def parse_overrides(overrides: Iterable[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> nested dict with YAML-typed values."""
    nested: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(
                f"command line: override '{item}' must look like dotted.key=value"
            )
        key, _, text = item.partition("=")
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"command line: override '{item}' has an empty key part")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"command line: cannot parse value of '{key}': {exc}") from exc
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"command line: '{key}' conflicts with another override")
        node[parts[-1]] = value
    return nested


def _merge(cfg: DictConfig, raw: dict, source: str) -> DictConfig:
    try:
        return OmegaConf.merge(cfg, raw)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        msg = str(exc).splitlines()[0]
        raise ConfigError(f"{source}: invalid value for '{key}': {msg}") from exc


def load_config(
    path: str | Path | None = None,
    overrides: Iterable[str] = (),
    schema: type = ExperimentConfig,
) -> DictConfig:
    """Load ``schema`` defaults, then the YAML chain of ``path``, then ``overrides``.

    The result is read-only and fully typed; ``resolved(cfg)`` gives the plain dict that
    every result file records.
    """
    cfg = OmegaConf.structured(schema)
    if path is not None:
        for file_path, raw in _yaml_chain(Path(path)):
            check_keys(raw, schema, str(file_path))
            cfg = _merge(cfg, raw, str(file_path))
    nested = parse_overrides(overrides)
    if nested:
        check_keys(nested, schema, "command line")
        cfg = _merge(cfg, nested, "command line")
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot resolve config: {str(exc).splitlines()[0]}") from exc
    OmegaConf.set_readonly(cfg, True)
    return cfg


def as_dataclass(cfg: Any) -> Any:
    """A plain dataclass instance of a (sub)config: fast attribute access in hot loops."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_object(cfg)
    return cfg


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The fully resolved config as a plain JSON-serialisable dict (enums as names)."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def to_yaml(cfg: DictConfig) -> str:
    return yaml.safe_dump(resolved(cfg), sort_keys=False)
