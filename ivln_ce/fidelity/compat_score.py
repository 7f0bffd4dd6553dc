"""Scoring instructions with a trained compatibility model (``ivln-ce score-instructions``).

Each episode's instruction is scored against its own path: the cosine similarity S of the two
encodings (the seed's compatibility score) and p = sigmoid(a S + b). With labels (compatible 1,
incompatible 0) the report gives the ROC AUC over every labelled pair, the AUC of the clean pairs
against each perturbation kind, and the ranking of each clean instruction against its own
degraded variants: over (clean episode, perturbed episode made from it) pairs, the fraction in
which the clean one scores higher (a tie counts one half).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ivln_ce.data.jsonio import DataFormatError, short_repr
from ivln_ce.data.vocab import Vocabulary
from ivln_ce.fidelity.compat_checkpoint import check_tensors, read_sealed
from ivln_ce.fidelity.compat_checks import check_device, check_int
from ivln_ce.fidelity.compat_data import CLEAN, CompatPair
from ivln_ce.fidelity.compat_features import FeatureCache, ViewSettings, trajectory_batch
from ivln_ce.fidelity.compat_model import CompatibilityModel, CompatModelConfig
from ivln_ce.metrics.roc import roc_auc

CHECKPOINT_FORMAT = "ivln_ce.compat/2"
SCORES_FORMAT = "ivln_ce.compat_scores/1"
#: instructions longer than this many tokens are cut (the released files pad to 200)
MAX_TOKENS = 200


def encode_texts(texts: Sequence[str], vocab: Vocabulary, device: str | torch.device = "cpu") -> torch.Tensor:
    """(N, L) token ids of the texts with the model's vocabulary, zero-padded; an empty text
    becomes one <unk> so that every row has a token."""
    rows = [vocab.encode(t, None)[:MAX_TOKENS] or [1] for t in texts]
    out = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out.to(device)


@torch.no_grad()
def score_pairs(model: CompatibilityModel, pairs: Sequence[CompatPair], cache: FeatureCache, settings: ViewSettings,
                vocab: Vocabulary, batch_size: int = 64, device: str | torch.device = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """(S, p) of each pair's instruction on its own path, in eval mode."""
    was_training = model.training
    model.eval()
    s_all, p_all = [], []
    try:
        for i in range(0, len(pairs), batch_size):
            chunk = pairs[i:i + batch_size]
            hw = model.encode_instructions(encode_texts([p.text for p in chunk], vocab, device))
            tb = trajectory_batch([p.path for p in chunk], cache.get, settings, device)
            hv = model.encode_trajectories(tb.views, tb.orientation, tb.geometry, tb.lengths)
            s = torch.nn.functional.cosine_similarity(hw, hv, dim=1)
            s_all.append(s.cpu().numpy())
            p_all.append(model.probability(s).cpu().numpy())
    finally:
        model.train(was_training)
    if not s_all:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(s_all).astype(np.float64), np.concatenate(p_all).astype(np.float64)


@dataclass
class LoadedModel:
    model: CompatibilityModel
    settings: ViewSettings
    vocab: Vocabulary
    info: dict = field(default_factory=dict)


def load_compat_checkpoint(path: str | Path, device: str = "cpu", rgb_weights: str | None = None) -> LoadedModel:
    """A ``compat.pt`` written by ``ivln-ce train-compat``: read with the data-only loader, its
    checksum verified, every field checked (model sizes against their caps before the model is
    built, the vocabulary, the view settings, finite weights). A checkpoint whose frozen RGB
    trunk had weights needs them again (``rgb_weights``, checked against the recorded SHA-256):
    a path stored in the file is never opened."""
    from ivln_ce.models.official_weights import load_state

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    ckpt = read_sealed(path, "compatibility-model checkpoint", CHECKPOINT_FORMAT)
    try:
        mcfg = CompatModelConfig(**_field(ckpt, "model", dict, path))
    except (TypeError, ValueError) as exc:
        raise DataFormatError(f"{path}: field model: {exc}") from None
    try:
        settings = ViewSettings(**_field(ckpt, "views", dict, path))
    except (TypeError, ValueError) as exc:
        raise DataFormatError(f"{path}: field views: {exc}") from None
    if settings.views != mcfg.views:
        raise DataFormatError(f"{path}: field views.views {settings.views} differs from model.views {mcfg.views}")
    words = _field(ckpt, "vocab", list, path)
    if len(words) != mcfg.vocab_size or not all(isinstance(w, str) and len(w) <= MAX_WORD for w in words):
        raise DataFormatError(f"{path}: field vocab: expected {mcfg.vocab_size} (model.vocab_size) words of at most "
                              f"{MAX_WORD} characters, got {len(words)} entries")
    try:
        vocab = Vocabulary(list(words))
    except ValueError as exc:
        raise DataFormatError(f"{path}: field vocab: {exc}") from None
    state = check_tensors(ckpt.get("state_dict"), path, "state_dict")
    settings = _rgb_weights(settings, ckpt, path, rgb_weights)
    model = CompatibilityModel(mcfg)
    load_state(model, state, str(path), strict=True)
    return LoadedModel(model.to(device).eval(), settings, vocab,
                       {k: ckpt.get(k) for k in ("epoch", "step", "history", "train")})


#: longest word of a checkpoint's vocabulary
MAX_WORD = 1000


def _field(ckpt: dict, name: str, kind: type, path: Path):
    """``ckpt[name]`` of type ``kind``; a dict of a dataclass's settings must name each of them (no defaults)."""
    value = ckpt.get(name)
    if not isinstance(value, kind):
        raise DataFormatError(f"{path}: field {name}: expected a {kind.__name__}, got {type(value).__name__}")
    fields = {"model": CompatModelConfig, "views": ViewSettings}.get(name)
    if fields is not None:
        want = {f.name for f in dataclasses.fields(fields)}
        if set(value) != want:
            raise DataFormatError(f"{path}: field {name}: missing {sorted(want - set(value))[:5]}, "
                                  f"unknown {[short_repr(k) for k in list(set(value) - want)[:5]]}")
    return value


def _rgb_weights(settings: ViewSettings, ckpt: dict, path: Path, given: str | None) -> ViewSettings:
    """The settings with the RGB trunk weights the user gave (never the path the file names)."""
    from dataclasses import replace

    from ivln_ce import fingerprint as fpr

    recorded = ckpt.get("rgb_weights_sha256")
    if not settings.rgb_weights and recorded is None:
        if given:
            raise ValueError(f"--rgb-weights {given}: {path} was trained with the seeded random RGB trunk; leave it out")
        return settings
    if not isinstance(recorded, str):
        raise DataFormatError(f"{path}: field rgb_weights_sha256: expected the SHA-256 of the RGB trunk weights, "
                              f"got {type(recorded).__name__}")
    if not given:
        raise ValueError(f"{path} was trained with RGB trunk weights ({short_repr(settings.rgb_weights)}); "
                         f"give the same file with --rgb-weights")
    if not Path(given).is_file():
        raise FileNotFoundError(f"--rgb-weights {given}: no such file")
    if fpr.sha256_file(given) != recorded:
        raise ValueError(f"--rgb-weights {given}: not the weights {path} was trained with (SHA-256 differs)")
    return replace(settings, rgb_weights=str(given))


def _safe_auc(scores, labels) -> float | None:
    y = np.asarray(labels)
    if len(y) == 0 or y.min() == y.max():
        return None
    return roc_auc(scores, labels)


@dataclass
class ScoreSummary:
    n: int
    auc: float | None
    #: kind -> AUC of the clean pairs against that kind's pairs
    auc_by_kind: dict[str, float | None]
    #: family (instruction / trajectory) -> AUC of the clean pairs against the family
    auc_by_family: dict[str, float | None]
    #: kind -> {pairs, clean_higher}: clean instruction vs its own degraded variants
    ranking: dict[str, dict[str, float]]


def summarise(pairs: Sequence[CompatPair], scores: np.ndarray, labels: Sequence[int | None],
              sources: dict[str, int] | None = None) -> ScoreSummary:
    """AUCs and rankings of scored pairs. ``labels``: 1, 0 or None (unlabelled: left out).
    ``sources``: clean episode id -> index into ``pairs`` (the clean file the perturbed pairs
    were made from), for the ranking."""
    lab = [(i, l) for i, l in enumerate(labels) if l is not None]
    idx = np.array([i for i, _ in lab], dtype=int)
    y = np.array([l for _, l in lab], dtype=int)
    auc = _safe_auc(scores[idx], y) if len(idx) else None
    clean = [i for i, p in enumerate(pairs) if p.kind == CLEAN and labels[i] == 1]
    by_kind, by_family = {}, {}
    for group, key in (("kind", lambda p: p.kind), ("family", lambda p: p.family)):
        values = sorted({key(p) for p in pairs if p.kind != CLEAN})
        for v in values:
            neg = [i for i, p in enumerate(pairs) if p.kind != CLEAN and key(p) == v and labels[i] == 0]
            ids = clean + neg
            r = _safe_auc(scores[ids], [1] * len(clean) + [0] * len(neg)) if clean and neg else None
            (by_kind if group == "kind" else by_family)[v] = r
    ranking: dict[str, dict[str, float]] = {}
    if sources:
        for i, p in enumerate(pairs):
            if p.kind == CLEAN or p.source_episode_id not in sources:
                continue
            j = sources[p.source_episode_id]
            r = ranking.setdefault(p.kind, {"pairs": 0, "clean_higher": 0.0})
            r["pairs"] += 1
            r["clean_higher"] += 1.0 if scores[j] > scores[i] else 0.5 if scores[j] == scores[i] else 0.0
        for r in ranking.values():
            r["clean_higher"] = r["clean_higher"] / r["pairs"]
    return ScoreSummary(len(idx), auc, by_kind, by_family, ranking)


@dataclass
class ScoreRequest:
    checkpoint: Path
    episodes: list[Path]
    scenes_dir: Path
    out: Path
    #: None (no labels), "perturbation" (an episode with a perturbation record is 0, else 1) or a JSON file
    labels: str | None = None
    cache: Path | None = None
    batch_size: int = 64
    device: str = "cpu"
    #: the RGB trunk weights the checkpoint was trained with (when it was)
    rgb_weights: str | None = None

    def check(self) -> None:
        """The arguments, before any file is read."""
        check_int("--batch-size", self.batch_size, 1, MAX_BATCH)
        check_device("--device", self.device)
        if self.labels not in (None, "perturbation") and not Path(self.labels).is_file():
            raise FileNotFoundError(f"--labels {self.labels}: no such file (or use --labels perturbation)")
        if not Path(self.scenes_dir).is_dir():
            raise FileNotFoundError(f"--scenes-dir {self.scenes_dir}: no such folder")
        if not Path(self.out).name.endswith(".json"):
            raise ValueError(f"--out {self.out}: expected a .json file name")
        if self.cache is not None and Path(self.cache).exists() and not Path(self.cache).is_dir():
            raise ValueError(f"--feature-cache {self.cache}: not a folder")


#: largest --batch-size of score-instructions
MAX_BATCH = 4096


def _labels_file(path: Path, n_files: int) -> dict[str, int]:
    from ivln_ce.data.jsonio import read_json

    if n_files != 1:
        raise ValueError(f"--labels {path}: a labels file applies to exactly one --episodes file, got {n_files}")
    raw = read_json(path)
    table = raw.get("labels") if isinstance(raw, dict) else None
    if not isinstance(table, dict):
        raise DataFormatError(f"{path}: expected an object with a 'labels' object (episode id -> 0 or 1)")
    bad = [k for k, v in table.items() if v not in (0, 1) or isinstance(v, bool)]
    if bad:
        raise DataFormatError(f"{path}: labels of episode(s) {bad[:5]}: expected 0 or 1")
    return {str(k): int(v) for k, v in table.items()}


def score_instructions(req: ScoreRequest, show_progress: bool = True,
                       log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict:
    """Score every episode of the files; write ``req.out`` (JSON, atomically) and return it."""
    from ivln_ce.data.episodes import load_episodes
    from ivln_ce.data.jsonio import write_json
    from ivln_ce.fidelity.compat_data import clean_path_index, pairs_of
    from ivln_ce.fidelity.compat_features import FrameEncoder

    req.check()
    out = Path(req.out)
    loaded = load_compat_checkpoint(req.checkpoint, req.device, req.rgb_weights)
    datasets = [load_episodes(f) for f in req.episodes]
    # perturbed files name their source episodes; the first file without perturbations is their source
    clean_index: dict[str, str] = {}
    pairs_per_file = []
    for f, ds in zip(req.episodes, datasets):
        pairs = pairs_of(ds, str(f), clean_index)
        if not clean_index and all(p.kind == CLEAN for p in pairs):
            clean_index = clean_path_index(pairs, ds)
        pairs_per_file.append(pairs)
    source_file = next((i for i, ps in enumerate(pairs_per_file) if ps and all(p.kind == CLEAN for p in ps)), None)
    pairs = [p for ps in pairs_per_file for p in ps]
    file_of = [i for i, ps in enumerate(pairs_per_file) for _ in ps]
    if req.labels is None:
        labels: list[int | None] = [None] * len(pairs)
    elif req.labels == "perturbation":
        labels = [p.label for p in pairs]
    else:
        table = _labels_file(Path(req.labels), len(req.episodes))
        labels = [table.get(p.episode_id) for p in pairs]
    encoder = FrameEncoder(loaded.settings, req.scenes_dir, req.device)
    try:
        cache = FeatureCache(encoder, req.cache)
        cache.fill([p.path for p in pairs], show_progress=show_progress)
        if cache.replaced:
            log(cache.summary())
        scores, probs = score_pairs(loaded.model, pairs, cache, loaded.settings, loaded.vocab, req.batch_size, req.device)
    finally:
        encoder.close()
    sources = None
    if source_file is not None:
        sources = {p.episode_id: k for k, (p, fi) in enumerate(zip(pairs, file_of)) if fi == source_file}
    summary = summarise(pairs, scores, labels, sources)
    rows = [{"file": fi, "episode_id": p.episode_id, "kind": p.kind, "source_episode_id": p.source_episode_id,
             "score": float(s), "probability": float(q), "label": lab}
            for p, fi, s, q, lab in zip(pairs, file_of, scores, probs, labels)]
    report = {"format": SCORES_FORMAT, "checkpoint": str(req.checkpoint), "files": [str(f) for f in req.episodes],
              "labels": req.labels, "labelled": summary.n, "auc": summary.auc, "auc_by_kind": summary.auc_by_kind,
              "auc_by_family": summary.auc_by_family, "ranking": summary.ranking, "scores": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, report, indent=1)
    return report


def format_report(report: dict) -> str:
    """A Markdown table of the AUCs and rankings."""
    f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    lines = [f"{len(report['scores'])} instructions scored, {report['labelled']} labelled; AUC (all labelled): {f(report['auc'])}"]
    if report["auc_by_kind"]:
        lines += ["", "| negatives | AUC clean vs them | clean ranked above its own variant (pairs) |", "|---|---:|---:|"]
        for fam, v in report["auc_by_family"].items():
            lines.append(f"| {fam} family | {f(v)} | |")
        for kind, v in report["auc_by_kind"].items():
            r = report["ranking"].get(kind)
            lines.append(f"| {kind} | {f(v)} | " + (f"{r['clean_higher']:.3f} ({r['pairs']})" if r else "-") + " |")
    return "\n".join(lines) + "\n"
