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
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

BASE_KEY = "_base_"



#: ``policy.checkpoint`` value for "the seeded random initialisation, on purpose", and the label
#: suffix of evaluations run with it
RANDOM_INIT = "random"
RANDOM_INIT_LABEL = "random-init"


def is_random_init(checkpoint) -> bool:
    """Whether ``policy.checkpoint`` names no weights: empty, or ``random`` said on purpose."""
    return str(checkpoint or "").strip() in ("", RANDOM_INIT)

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
    #: habitat-sim: a scene dataset config (e.g. mp3d.scene_dataset_config.json); empty = none.
    #: Required for a semantic sensor on MP3D scenes (it orients their semantic mesh)
    scene_dataset_config: str = ""
    #: the GPU that renders (habitat-sim ``gpu_device_id``; the embedded renderer's EGL device
    #: where the driver exposes one); -1 = this process's local rank (LOCAL_RANK under torchrun),
    #: else 0
    gpu_device_id: int = -1


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
    #: the start phase walks to within this geodesic distance of the next start (SPEC §3.3:
    #: 0.25 m, the forward step, in every profile); a separate follower from the goal phase's
    oracle_start_radius: float = 0.25
    #: the DAgger expert (``shortest_path_sensor``, SPEC §2.4/2.6): goal radius 0.5 m
    expert_radius: float = 0.5
    #: official true (R9): the expert is queried on every observation (the reset frame and oracle
    #: steps included) and those queries enter its history; false queries it on agent steps only
    expert_query_every_observation: bool = False
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


class DepthBackbone(str, enum.Enum):
    resnet50 = "resnet50"  # the DD-PPO GroupNorm ResNet-50 (official, frozen)
    small = "small"  # a small CNN with the same 128x4x4 output, for CPU work


class EmbeddingTraining(str, enum.Enum):
    auto = "auto"  # official: a learned table without GloVe, GloVe frozen
    learn = "learn"  # train the table, GloVe too (the official fine_tune_embeddings)
    freeze = "freeze"  # keep the table as loaded or initialised (a random table stays random)


class PolicyName(str, enum.Enum):
    none = "none"  # no learned policy (scripted agents)
    cma = "cma"
    tour_cma = "tour_cma"
    pool_cma = "pool_cma"
    pool_end_cma = "pool_end_cma"
    map_cma = "map_cma"


@dataclass
class PolicyConfig:
    """A learned navigation policy (SPEC §8) and the weights it starts from."""

    name: PolicyName = PolicyName.none
    #: a checkpoint file (the toolkit's or an official IVLN-CE one), or a folder of
    #: ``ckpt.{i}.pth`` files (evaluated in index order); empty = random initialisation (training
    #: starts from it; ``eval`` refuses it); ``random`` = the seeded random initialisation, said
    #: on purpose (``eval`` labels such runs ``{policy.name}-random-init``)
    checkpoint: str = ""
    depth_backbone: DepthBackbone = DepthBackbone.resnet50
    #: seed of the frozen encoders' random initialisation (the depth backbone, the RGB trunk) when
    #: no weights file gives them; -1 = the run's ``seed``. Fixed, runs of different seeds share
    #: their frozen encoders, as runs of pretrained ones do, and so one teacher-forcing
    #: collection (``train.store_cache``)
    frozen_encoder_seed: int = -1
    #: DD-PPO depth encoder weights (``gibson-2plus-resnet50.pth``); empty = none (random
    #: frozen encoder: smoke tests only). A checkpoint's own copy wins.
    ddppo_weights: str = ""
    #: ImageNet ResNet weights for the latent models' RGB trunk (a torchvision-layout state
    #: dict); empty = none
    rgb_weights: str = ""
    #: RGB trunk depth (50 as officially; 18 for CPU work)
    rgb_depth: int = 50
    #: GloVe table (``embeddings.json.gz``); empty = a learned table of the vocabulary's size
    embeddings: str = ""
    #: whether the word-embedding table trains: auto (official) learns a random table and keeps
    #: GloVe frozen; learn trains either; freeze keeps either as it is (toolkit results before
    #: 2026-11-25 were trained with a frozen random table: docs/results/README.md)
    embedding_training: EmbeddingTraining = EmbeddingTraining.auto
    #: T11: false keeps TourCMA's official behaviour (both GRUs persist over the tour, as in
    #: Table 3); true resets the second GRU every episode as the paper describes
    reset_state_gru_per_episode: bool = False


class TrainerKind(str, enum.Enum):
    dagger = "dagger"  # collection rounds + episodic batches (teacher forcing when p = 1), SPEC §9.2-9.5
    tour_sequential = "tour_sequential"  # lanes of tours, state carried across batches, SPEC §9.6
    rl = "rl"  # reinforcement fine-tuning (A2C / PPO) on the rollout engine, seed 000 (``train.rl``)


class RLAlgorithm(str, enum.Enum):
    a2c = "a2c"  # one pass over each rollout (advantage actor-critic)
    ppo = "ppo"  # the clipped surrogate objective, ``ppo_epochs`` passes over each rollout


@dataclass
class RLConfig:
    """Reinforcement fine-tuning (``train.trainer=rl``, seed 000 §4): on-policy rollouts of
    ``train.update_size`` episodes (0 = every episode or tour of the split) with
    ``train.num_envs`` environments, then an A2C or PPO update; ``train.iterations`` updates,
    ``train.lr``, ``train.max_steps`` as for the other trainers."""

    algorithm: RLAlgorithm = RLAlgorithm.a2c
    #: goal (Eq. 11), fidelity (Eq. 12: success + CLS), ndtw (success + nDTW), or a weighted
    #: sum such as goal:0.5,fidelity:1
    reward: str = "goal"
    #: the success term at an episode's end: this when it succeeded (STOP within
    #: metrics.success_distance), else failure_reward (the seed: 1 and 0)
    success_reward: float = 1.0
    failure_reward: float = 0.0
    #: weight of the per-step change of CLS added to every reward (§4.3; 0 = off, as the seed)
    cls_shaping: float = 0.0
    gamma: float = 0.99
    #: GAE lambda; 1 = the seed's advantage R_t - V(s_t)
    gae_lambda: float = 1.0
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    #: advantages normalised to zero mean, unit deviation over each rollout
    normalize_advantages: bool = True
    #: PPO: passes over each rollout and the ratio clip
    ppo_epochs: int = 4
    ppo_clip: float = 0.2
    #: optimizer steps per pass: the rollout's episodes split into this many minibatches
    minibatches: int = 1
    #: gradient norm clip (0 = none)
    max_grad_norm: float = 0.5
    #: write ckpt.{u}.pth after every this many updates (and after the last)
    checkpoint_every: int = 10
    #: the seed warm-starts from behavioural cloning: policy.checkpoint is required unless this
    #: is true (random initialisation: tests and ablations)
    allow_random_init: bool = False


class StoreCodec(str, enum.Enum):
    raw = "raw"  # memory-mapped, zero-copy reads
    zlib = "zlib"  # compressed per array (maps compress well)


class Precision(str, enum.Enum):
    fp32 = "fp32"  # float32 everywhere (the official numbers)
    bf16 = "bf16"  # torch.autocast with bfloat16: matmuls and convolutions in bf16; weights, recurrent layers and losses fp32


class LRRule(str, enum.Enum):
    fixed = "fixed"  # train.lr whatever the batch size
    sqrt = "sqrt"  # train.lr * sqrt(train.batch_size / train.lr_reference_batch)
    linear = "linear"  # train.lr * train.batch_size / train.lr_reference_batch


class SequenceForward(str, enum.Enum):
    whole = "whole"  # every layer over the (T, B) batch at once, the GRUs as whole-sequence calls (cuDNN on CUDA)
    step = "step"  # the per-step loop that evaluation's ``act`` runs: the reference of ``whole``, equal within 1e-5


@dataclass
class TrainConfig:
    """The trainers of SPEC §9. Defaults are the paper's values (§9.1, §9.7); the embedded-scale
    recipes under ``configs/`` change what a 2-core CPU can afford and say so."""

    trainer: TrainerKind = TrainerKind.dagger
    #: the split whose episodes are collected (train, envdrop, joint_train_envdrop, ...)
    split: str = "train"
    #: collect through the split's tours (tours.json) with the iterative runner; false runs every
    #: episode on its own (the episodic runner)
    use_tours: bool = False
    #: train only on these tour ids of the split (their episodes, alone unless use_tours); empty = all
    tours: list[str] = field(default_factory=list)
    #: collection + training rounds (DAgger iterations)
    iterations: int = 1
    #: beta_k = p^k (exponent k + 1 when warm-started from a checkpoint, as officially, T6);
    #: p = 1 is teacher forcing
    p: float = 1.0
    #: episodes collected per round (0 = every episode of the split once)
    update_size: int = 0
    epochs: int = 45
    batch_size: int = 5
    lr: float = 2.5e-4
    #: how train.lr moves with the batch size (training/lr_rule.py): fixed, sqrt or linear in
    #: train.batch_size / train.lr_reference_batch
    lr_rule: LRRule = LRRule.fixed
    #: the batch size train.lr was tuned at (needed by the sqrt and linear rules)
    lr_reference_batch: int = 0
    #: optimizer steps over which the rate rises linearly to its peak (0 = none)
    lr_warmup_steps: int = 0
    #: inflection weighting coefficient (SPEC §9.4); 1 = off
    inflection_weight: float = 3.2
    #: weight of the progress-monitor loss (1 for MAP-CMA, 0 for the latent baselines)
    progress_weight: float = 0.0
    #: stop after this many optimizer steps in total (0 = no limit): tiny smoke budgets
    max_steps: int = 0
    #: collection environments (per rank under torchrun)
    num_envs: int = 4
    #: environments per worker process (they share its scene caches and GL context): K may
    #: exceed the cores
    envs_per_worker: int = 1
    #: worker groups taken in turn, so one group steps while another is decided (1: lockstep)
    groups: int = 1
    #: cpu, cuda or cuda:N (under torchrun "cuda" is the rank's local GPU)
    device: str = "cpu"
    #: where checkpoints, the store, TensorBoard events and the summary go
    out_dir: str = "${results_dir}"
    #: float features stored as fp16; per-array compression of the store
    store_fp16: bool = True
    store_codec: StoreCodec = StoreCodec.zlib
    #: false: the store keeps only the actions of every step (a few bytes); before training,
    #: each round is replayed with them and its observations are re-rendered into OUT/replay
    #: (a cache, rebuilt on resume, deletable after the run). Incompatible with bn_train_mode
    #: (batch statistics make collected features depend on who shared the batch)
    store_observations: bool = True
    #: teacher forcing (beta = 1, no T3) encodes each episode's frames with the frozen encoders
    #: in batches of 64 as they accumulate, not the few of every tick: several times faster on a
    #: CPU, the same features within rounding; false encodes per tick (the previous path)
    deferred_encoding: bool = True
    #: DataLoader worker processes reading the store
    loader_workers: int = 0
    #: checkpoint the exact training state every this many optimizer steps (0 = per epoch only)
    resume_every: int = 0
    #: T1 (official true): the progress-monitor loss broadcasts (T*B,) against (T*B, 1)
    pm_broadcast_bug: bool = False
    #: T3 (official true): BatchNorm layers run in train mode during collection (the frozen RGB
    #: trunk, MAP-CMA's map encoder); false collects in eval mode
    bn_train_mode: bool = False
    #: T12 (official true): three contiguous loader shares, shuffled blocks, randomly permuted
    #: buffers, per-share drop-last; false buckets batches by true episode length, drops nothing
    official_batching: bool = False
    #: T2 (official true): tour-sequential training carries the recurrent state after the padded
    #: steps; false carries the state at each episode's true last step
    carry_padded_state: bool = False
    #: T7 (official true): fixed lanes (tours in decreasing size, greedy packing) and the
    #: off-by-one drop-last; false reshuffles tours into lanes every epoch and keeps every episode
    official_lanes: bool = False
    #: P6 (official false): iterative-maps DAgger fine-tuning (MAP-CMA, mapping.mode=iterative,
    #: train.p < 1) collects on the split's tours; false runs the split's episodes without tours,
    #: in one scene-grouped chain per collection environment (train.num_envs), through the
    #: iterative runner (the oracle walks between unrelated episodes and the map spans the whole
    #: round), whatever train.use_tours says; teacher forcing (p = 1) is not affected
    itmaps_ft_on_tours: bool = True
    #: official true: the official store's fp16 option converts every stored observation to
    #: fp16, instruction token ids included, and fp16 represents integers exactly only up to
    #: 2048, so larger ids are rounded (2049 -> 2048, 2051 -> 2052); applied when store_fp16
    fp16_token_bug: bool = False
    #: shuffle the episodes inside every tour each epoch of tour-sequential training (official)
    shuffle_within_tour: bool = True
    #: evaluate every checkpoint on these splits while training (``eval_{split}_{metric}`` in
    #: TensorBoard); empty = none
    eval_splits: list[str] = field(default_factory=list)
    #: after every epoch, score teacher-forced action accuracy and loss on this split's expert
    #: trajectories (collected once into OUT/val_store; ``val/`` in TensorBoard, ``validation``
    #: in the summary); empty = none
    val_split: str = ""
    #: score train.val_split again with the instructions ablated: none (all padding), last:K;
    #: e.g. [none]: an agent that reads loses accuracy without its instruction
    val_ablations: list[str] = field(default_factory=list)
    #: the tours (ids) of those splits that the in-training evaluation runs; empty = every tour.
    #: A few tours make a cheap learning curve; the final numbers come from ``ivln-ce eval``
    eval_tours: list[str] = field(default_factory=list)
    #: arithmetic of the training forward pass (docs/results/precision.md measures bf16 on CPU)
    precision: Precision = Precision.fp32
    #: how the training forward runs a batch of (T, B) sequences: whole (every layer over T x B at
    #: once, one GRU call per layer) or step (one ``CMANet.step`` per timestep: the reference,
    #: equal within 1e-5)
    sequence_forward: SequenceForward = SequenceForward.whole
    #: CUDA only: MAP-CMA's map encoder convolves channels-last inputs while training (cuDNN's
    #: NHWC kernels; the CUDA test compares its gradients with a float64 reference); no effect on
    #: the other policies. Refused on a CPU, where oneDNN's channels-last gradients lose digits
    channels_last: bool = False
    #: a folder of teacher-forcing stores shared by runs (empty = none): a round with beta = 1 is
    #: copied from there when a store of exactly the same inputs (data, simulator, environment,
    #: maps, frozen encoders, store format) is present and passes its checks, else collected and
    #: added (``training/store_cache.py``)
    store_cache: str = ""
    #: reinforcement fine-tuning (train.trainer=rl)
    rl: RLConfig = field(default_factory=RLConfig)


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
    #: RedNet checkpoint for ``semantics: rednet`` (official ``rednet_mp3d_best_model.pkl``
    #: layout, or the toolkit's ``train-rednet`` checkpoint)
    rednet_checkpoint: str = "${data.root}/rednet_mp3d_best_model.pkl"
    #: RedNet encoder depth of that checkpoint (50 officially)
    rednet_depth: int = 50
    #: save per-episode map images during evaluation
    save_images: bool = False


@dataclass
class EvalConfig:
    #: ``policy`` evaluates the learned policy of ``policy.*``; or a scripted reference agent:
    #: oracle (the follower, an upper bound), random, forward, stop
    agent: str = "policy"
    split: str = "${data.split}"
    #: tour environments stepping in parallel (each its own simulator); under torchrun, per rank
    num_envs: int = 1
    #: environments per worker process (they share its scene caches and GL context): K may
    #: exceed the cores, e.g. K = the number of tours
    envs_per_worker: int = 1
    #: worker groups taken in turn, so one group's environments step while another's
    #: observations are mapped and decided (1: every stream in one lockstep batch)
    groups: int = 1
    #: where the policy, the mapper and the encoders run: cpu, cuda or cuda:N (under torchrun
    #: "cuda" means the rank's local GPU)
    device: str = "cpu"
    #: argmax actions (the official evaluation); false samples from the policy
    deterministic: bool = True
    #: where the policy runs. main: one batched step per tick in this process (GPUs batch for
    #: free); workers: each environment worker runs its own copy at batch 1 (CPUs: a sample
    #: costs the same batched or not, and K workers use K cores); auto: workers on a CPU device
    #: unless maps, frames or videos are recorded (recorders live in this process), else main
    policy_process: str = "auto"
    #: evaluate only these tour ids (t-nDTW is then "partial" and paper-variant only)
    tours: list[str] = field(default_factory=list)
    #: label of the output files (``*_ckpt_{label}_{split}.json``); defaults to the agent name,
    #: or to the checkpoint index for ``ckpt.{i}.pth`` files
    label: str = ""
    #: reuse per-tour results already on disk whose fingerprint matches (resume)
    resume: bool = True
    #: with a checkpoint folder: keep watching it for new checkpoints while training writes them
    poll: bool = False
    #: stop polling after this many seconds without a new checkpoint
    poll_timeout: float = 3600.0
    poll_interval: float = 30.0
    #: save the first and last RGB frame of every episode (``frames_{label}_{split}/``)
    save_frames: bool = False
    #: write a video per episode: RGB | depth | egocentric map | top-down (``videos_{label}_{split}/``)
    video: bool = False
    #: language ablation (analysis only; ``data/language_ablation.py``): full; last:K (only the
    #: last K tokens); none (all padding, vision kept); other (the instruction of another path of
    #: the split, drawn with instruction_seed; the reference path is unchanged)
    instruction: str = "full"
    #: seed of the draw of ``instruction: other``
    instruction_seed: int = 0
    #: arithmetic of the policy's steps (fp32 or bf16 autocast; encoders outside the policy stay fp32)
    precision: Precision = Precision.fp32


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
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


# --------------------------------------------------------------------------- key checking


def check_cuda_device(key: str, device: str) -> None:
    """ConfigError unless a ``cuda`` / ``cuda:N`` device names a GPU torch sees (``cpu`` passes;
    torch is imported only for a CUDA device). ``key`` is the setting or flag named in the message."""
    if not str(device).startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"{key}={device} but torch sees no CUDA device; use {key}=cpu")
    index = str(device).partition(":")[2]
    if index and int(index) >= torch.cuda.device_count():
        raise ConfigError(f"{key}={device}: torch sees {torch.cuda.device_count()} CUDA device(s), numbered from 0")


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


def _take_required(raw: dict, prefix: str = "") -> list[str]:
    """Remove the ``???`` leaves of a raw config mapping; returns their dotted keys."""
    out = []
    for key in list(raw):
        value = raw[key]
        if isinstance(value, dict):
            out += _take_required(value, f"{prefix}{key}.")
        elif value == "???":
            del raw[key]
            out.append(f"{prefix}{key}")
    return out


def _leaf_paths(raw: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    for key, value in raw.items():
        if isinstance(value, Mapping) and value:
            yield from _leaf_paths(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def load_config(
    path: str | Path | Sequence[str | Path] | None = None,
    overrides: Iterable[str] = (),
    schema: type = ExperimentConfig,
) -> DictConfig:
    """Load ``schema`` defaults, then the YAML chain of ``path`` (or of each path of a list, in
    order: e.g. a recipe and then ``configs/profiles/official.yaml``), then ``overrides``.

    Values are range-checked before anything runs (``check_values``): a bad value is an error
    naming the key, where it was set and what is expected. The result is read-only and fully
    typed; ``resolved(cfg)`` gives the plain dict that every result file records.
    """
    cfg = OmegaConf.structured(schema)
    sources: dict[str, str] = {}
    required: dict[str, str] = {}  # keys a file marks ??? (only the user can give them) -> that file
    paths = [] if path is None else [path] if isinstance(path, (str, Path)) else list(path)

    def merge(raw: dict, source: str) -> None:
        nonlocal cfg
        marked = _take_required(raw)
        check_keys(raw, schema, source)
        for key in _leaf_paths(raw):
            required.pop(key, None)
        required.update(dict.fromkeys(marked, source))
        cfg = _merge(cfg, raw, source)
        sources.update(dict.fromkeys(_leaf_paths(raw), source))

    for one in paths:
        for file_path, raw in _yaml_chain(Path(one)):
            merge(raw, str(file_path))
    nested = parse_overrides(overrides)
    if nested:
        merge(nested, "command line")
    if required:
        key, where = sorted(required.items())[0]
        more = sorted(required)[1:]
        raise ConfigError(f"{where}: config key '{key}' must be given (the file marks it ???), e.g. on the command line: "
                          f"{key}=VALUE" + (f"; also needed: {more}" if more else ""))
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot resolve config: {str(exc).splitlines()[0]}") from exc
    if schema is ExperimentConfig:
        check_values(cfg, sources)
    OmegaConf.set_readonly(cfg, True)
    return cfg


# --------------------------------------------------------------------------- value checks


def _positive(v) -> bool:
    return v > 0


def _between(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False):
    def check(v) -> bool:
        return (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)

    return check


def _one_of(*allowed):
    return lambda v: v in allowed


_REWARD_ITEM = r"\s*(goal|fidelity|ndtw)\s*(:\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*)?"


#: the largest reward weight magnitude (the success and failure rewards have the same bound)
MAX_REWARD_WEIGHT = 1e6


def _reward_ok(v) -> bool:
    """``train.rl.reward``'s grammar (``rl.rewards.parse_reward`` reads it; names once each),
    every weight finite with |w| <= MAX_REWARD_WEIGHT, and not all of them 0 (no reward: no learning)."""
    items = str(v).split(",")
    names = [i.split(":")[0].strip() for i in items]
    if not all(re.fullmatch(_REWARD_ITEM, i) for i in items) or len(set(names)) != len(names):
        return False
    weights = [float(i.split(":")[1]) if ":" in i else 1.0 for i in items]
    return all(abs(w) <= MAX_REWARD_WEIGHT for w in weights) and any(w != 0 for w in weights)


#: the values of ``eval.instruction`` (``data/language_ablation.py``)
INSTRUCTION_ABLATION_PATTERN = r"full|none|other|last:[1-9][0-9]{0,5}"

#: The evaluation protocol (SPEC §3.8, §10.1): the runner keys every evaluation of a checkpoint
#: uses whatever the training recipe collected with (latent recipes collect without oracle
#: phases, iterative-maps DAgger without an oracle step limit). In-training evaluation
#: (``train.eval_splits``) sets them over the recipe's values.
EVALUATION_PROTOCOL: dict[str, Any] = {
    "env.oracle_phases": True,
    "env.oracle_goal_phase": True,
    "env.oracle_step_limit": 1000,
    "eval.deterministic": True,
}


#: key -> (check, what is expected). Every numeric key that a wrong value would turn into a
#: crash after the whole run, a silent nonsense score, or a huge allocation is listed here.
VALUE_RULES: dict[str, tuple[Any, str]] = {
    "seed": (_between(0, 2**31 - 1), "an integer in [0, 2147483647] (worker and critic seeds add offsets to it; "
                                      "numpy and torch take seeds below 2**32)"),
    "metrics.success_distance": (_positive, "a distance > 0 (metres)"),
    "metrics.tndtw.d_th": (_positive, "a distance > 0 (metres; the nDTW normaliser)"),
    "simulator.sensor_height": (_between(0.0, 10.0, lo_open=True), "a height in (0, 10] m"),
    "simulator.max_depth": (_between(0.0, 1000.0, lo_open=True), "a range in (0, 1000] m"),
    "simulator.forward_step": (_between(0.0, 5.0, lo_open=True), "a step in (0, 5] m"),
    "simulator.turn_angle": (_between(0.0, 180.0, lo_open=True), "an angle in (0, 180] degrees"),
    "simulator.agent_radius": (_between(0.0, 2.0, lo_open=True), "a radius in (0, 2] m"),
    "simulator.agent_height": (_between(0.0, 5.0, lo_open=True), "a height in (0, 5] m"),
    "simulator.max_climb": (_between(0.0, 2.0), "a climb in [0, 2] m"),
    "simulator.nav_cell": (_between(0.01, 0.5), "a grid cell in [0.01, 0.5] m"),
    "simulator.gpu_device_id": (lambda v: v >= -1, "a device index >= 0, or -1 for the local rank"),
    "env.max_agent_steps": (_between(1, 100_000), "an integer in [1, 100000]"),
    "env.oracle_goal_radius": (_between(0.0, 10.0, lo_open=True), "a radius in (0, 10] m"),
    "env.oracle_start_radius": (_between(0.0, 10.0, lo_open=True), "a radius in (0, 10] m"),
    "env.expert_radius": (_between(0.0, 10.0, lo_open=True), "a radius in (0, 10] m"),
    "env.oracle_step_limit": (lambda v: v >= -1, "an integer >= 0, or -1 for no limit"),
    "mapping.world_cell": (_between(0.005, 1.0), "a cell in [0.005, 1] m"),
    "mapping.map_size": (_between(8, 1024), "a size in [8, 1024] cells"),
    "mapping.map_cell": (_between(0.005, 1.0), "a cell in [0.005, 1] m"),
    "mapping.rednet_depth": (_one_of(18, 34, 50), "one of 18, 34, 50"),
    "policy.rgb_depth": (_one_of(18, 34, 50), "one of 18, 34, 50"),
    "eval.num_envs": (_between(1, 256), "an integer in [1, 256]"),
    "eval.envs_per_worker": (_between(1, 256), "an integer in [1, 256]"),
    "eval.groups": (_between(1, 256), "an integer in [1, 256]"),
    "train.iterations": (_between(1, 10_000), "an integer in [1, 10000]"),
    "train.p": (_between(0.0, 1.0), "a probability in [0, 1]"),
    "train.update_size": (_between(0, 10_000_000), "an integer in [0, 10000000] (0 = the whole split)"),
    "train.epochs": (_between(1, 100_000), "an integer in [1, 100000]"),
    "train.batch_size": (_between(1, 100_000), "an integer >= 1"),
    "train.lr": (_between(0.0, 1.0, lo_open=True), "a learning rate in (0, 1]"),
    "train.lr_reference_batch": (_between(0, 100_000), "an integer in [0, 100000] (0 = not set)"),
    "train.lr_warmup_steps": (_between(0, 10_000_000), "an integer in [0, 10000000]"),
    "train.inflection_weight": (_between(1.0, 1000.0), "a coefficient in [1, 1000]"),
    "train.progress_weight": (_between(0.0, 1000.0), "a weight in [0, 1000]"),
    "train.max_steps": (lambda v: v >= 0, "an integer >= 0 (0 = no limit)"),
    "train.num_envs": (_between(1, 256), "an integer in [1, 256]"),
    "train.envs_per_worker": (_between(1, 256), "an integer in [1, 256]"),
    "train.groups": (_between(1, 256), "an integer in [1, 256]"),
    "train.device": (lambda v: bool(re.fullmatch(r"cpu|cuda(:[0-9]+)?", v)), "cpu, cuda or cuda:N"),
    "train.loader_workers": (_between(0, 64), "an integer in [0, 64]"),
    "train.resume_every": (lambda v: v >= 0, "an integer >= 0"),
    "train.rl.gamma": (_between(0.0, 1.0), "a discount in [0, 1]"),
    "train.rl.gae_lambda": (_between(0.0, 1.0), "a lambda in [0, 1]"),
    "train.rl.value_coef": (_between(0.0, 1000.0), "a coefficient in [0, 1000]"),
    "train.rl.entropy_coef": (_between(0.0, 1000.0), "a coefficient in [0, 1000]"),
    "train.rl.ppo_epochs": (_between(1, 1000), "an integer in [1, 1000]"),
    "train.rl.ppo_clip": (_between(0.0, 10.0, lo_open=True), "a clip in (0, 10]"),
    "train.rl.minibatches": (_between(1, 100_000), "an integer >= 1"),
    "train.rl.max_grad_norm": (lambda v: v >= 0, "a norm >= 0 (0 = no clipping)"),
    "train.rl.checkpoint_every": (_between(1, 1_000_000), "an integer >= 1"),
    "train.rl.cls_shaping": (_between(-1000.0, 1000.0), "a weight in [-1000, 1000]"),
    "train.rl.success_reward": (_between(-1e6, 1e6), "a finite reward"),
    "train.rl.failure_reward": (_between(-1e6, 1e6), "a finite reward"),
    "train.rl.reward": (lambda v: _reward_ok(v), "a reward name (goal, fidelity, ndtw) or a weighted sum NAME:WEIGHT,... "
                                                 "(finite weights of at most 1e6 in magnitude, not all 0)"),
    "eval.device": (lambda v: bool(re.fullmatch(r"cpu|cuda(:[0-9]+)?", v)), "cpu, cuda or cuda:N"),
    "eval.poll_timeout": (_between(0.0, 365 * 86400.0, lo_open=True), "a duration in (0, 31536000] seconds"),
    "eval.policy_process": (_one_of("auto", "main", "workers"), "one of auto, main, workers"),
    "eval.instruction": (lambda v: bool(re.fullmatch(INSTRUCTION_ABLATION_PATTERN, str(v))),
                         "one of full, last:K (keep the last K >= 1 tokens), none (all padding), other (another path's instruction)"),
    "eval.instruction_seed": (lambda v: v >= 0, "an integer >= 0"),
    "eval.poll_interval": (_between(0.0, 86400.0, lo_open=True), "a duration in (0, 86400] seconds"),
}
for _sensor in ("rgb", "depth", "semantic"):
    for _dim in ("width", "height"):
        VALUE_RULES[f"simulator.{_sensor}.{_dim}"] = (_between(1, 4096), "a size in [1, 4096] pixels")
    VALUE_RULES[f"simulator.{_sensor}.hfov"] = (_between(0.0, 180.0, lo_open=True, hi_open=True), "an angle in (0, 180) degrees")

#: the largest world grid a stream may allocate (cells per side): 200 m at 5 cm
MAX_WORLD_CELLS = 4000


def _get(cfg: DictConfig, path: str) -> Any:
    return OmegaConf.select(cfg, path)


def check_values(cfg: DictConfig, sources: Mapping[str, str] | None = None) -> None:
    """Raise ConfigError naming the key, its source and the expectation for the first bad value."""
    sources = sources or {}

    def fail(key: str, value: Any, expected: str) -> None:
        where = sources.get(key, "defaults")
        raise ConfigError(f"{where}: config key '{key}' must be {expected}, got {value!r}")


    for key, (check, expected) in VALUE_RULES.items():
        value = _get(cfg, key)
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            fail(key, value, expected)
        if not check(value):
            fail(key, value, expected)
    sensors = list(_get(cfg, "simulator.sensors"))
    allowed = ("rgb", "depth", "semantic")
    bad = [x for x in sensors if x not in allowed]
    if bad or len(set(sensors)) != len(sensors):
        fail("simulator.sensors", sensors, f"a list of distinct names from {list(allowed)}")
    m = cfg.mapping
    cells = m.world_extent / m.world_cell
    view = m.map_size * m.map_cell * math.sqrt(2.0)
    if not (math.isfinite(m.world_extent) and m.world_extent >= view and cells <= MAX_WORLD_CELLS):
        fail("mapping.world_extent", m.world_extent,
             f"a side in [{view:.2f}, {MAX_WORLD_CELLS * m.world_cell:g}] m (at least the egocentric window's diagonal; "
             f"at most {MAX_WORLD_CELLS} cells of mapping.world_cell per side, about "
             f"{MAX_WORLD_CELLS ** 2 * 13 / 2**20:.0f} MiB per stream)")


def config_from_resolved(tree: Mapping[str, Any]) -> DictConfig:
    """A config back from ``resolved(cfg)`` (already validated; e.g. sent to a worker process)."""
    cfg = OmegaConf.merge(OmegaConf.structured(ExperimentConfig), dict(tree))
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


# --------------------------------------------------------------------------- profiles

#: The official implementation's behaviour (SPEC §11): every switch whose official value
#: reaches published numbers. ``configs/profiles/official.yaml`` sets exactly these values
#: (a test keeps the two in agreement); the schema defaults are the fixed profile.
OFFICIAL_PROFILE: dict[str, Any] = {
    "env.oracle_goal_radius": 0.25,  # R1, the same in both profiles
    "env.precise_episode_start": False,  # M11
    "env.reset_obs_at_nominal_start": True,  # R2
    "env.stale_obs_after_teleport": True,  # R4
    "env.log_final_pose_on_timeout": False,  # M10
    "env.oracle_double_query": True,  # R3
    "env.expert_query_every_observation": True,  # R9
    "train.pm_broadcast_bug": True,  # T1
    "train.bn_train_mode": True,  # T3
    "train.official_batching": True,  # T12
    "train.carry_padded_state": True,  # T2
    "train.official_lanes": True,  # T7
    "train.itmaps_ft_on_tours": False,  # P6
    "train.fp16_token_bug": True,  # the fp16 store option rounds token ids above 2048
    "policy.reset_state_gru_per_episode": False,  # T11, the same in both profiles
    "metrics.tndtw.variant": "official",
}


def profile_of(cfg: DictConfig) -> dict[str, Any]:
    """Which profile a config follows: ``official``, ``fixed`` (the defaults) or ``custom``,
    with every profile flag's value (for results manifests)."""
    defaults = OmegaConf.structured(ExperimentConfig)
    flags, official, fixed = {}, True, True
    for key, value in OFFICIAL_PROFILE.items():
        mine = _get(cfg, key)
        mine = mine.value if isinstance(mine, enum.Enum) else mine
        default = _get(defaults, key)
        default = default.value if isinstance(default, enum.Enum) else default
        flags[key] = mine
        official &= mine == value
        fixed &= mine == default
    name = "official" if official else "fixed" if fixed else "custom"
    return {"profile": name, "flags": flags}
