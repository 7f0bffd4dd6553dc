"""Checksummed torch files of the compatibility model: ``compat.pt`` and ``resume.pt``.

torch's zip container is not checked against its content on load, so a flipped bit in a tensor
reads back as another weight, and one in the pickled part as another epoch or step. Each file
written here holds ``checksum``: a SHA-256 over every other entry (tensors by dtype, shape and
bytes; numbers, strings and containers by their canonical form). ``read_sealed`` loads with the
data-only loader (``torch.load(weights_only=True)``: nothing is unpickled into code), bounds the
file's size first, recomputes the checksum and refuses a file whose content disagrees, naming it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from ivln_ce.data.jsonio import DataFormatError, short_repr

CHECKSUM_KEY = "checksum"
#: largest checkpoint read: a model at the parameter cap, with Adam's two moments, is about 600 MB
MAX_CHECKPOINT_BYTES = 1 << 30
_MAX_NESTING = 16


def _feed(h: hashlib._Hash, obj: Any, depth: int = 0) -> None:
    if depth > _MAX_NESTING:
        raise ValueError("entries nested too deeply")
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous().reshape(-1)
        h.update(f"T{t.dtype}{tuple(obj.shape)}:".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, dict):
        h.update(f"D{len(obj)}:".encode())
        for k in sorted(obj, key=repr):
            _feed(h, k, depth + 1)
            _feed(h, obj[k], depth + 1)
    elif isinstance(obj, (list, tuple)):
        h.update(f"L{len(obj)}:".encode())
        for v in obj:
            _feed(h, v, depth + 1)
    elif obj is None or isinstance(obj, (bool, int, float, str)):
        text = repr(obj).encode("utf-8", "backslashreplace")
        h.update(f"S{type(obj).__name__}{len(text)}:".encode())
        h.update(text)
    else:
        raise ValueError(f"unexpected entry of type {type(obj).__name__}")


def content_digest(obj: Any) -> str:
    """SHA-256 of a checkpoint's content (tensors, containers, plain scalars)."""
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()


def save_sealed(obj: dict, path: str | Path) -> None:
    """``obj`` plus its ``checksum``, written atomically."""
    from ivln_ce.models.factory import atomic_torch_save

    body = {k: v for k, v in obj.items() if k != CHECKSUM_KEY}
    atomic_torch_save({**body, CHECKSUM_KEY: content_digest(body)}, path)


def read_sealed(path: str | Path, what: str, fmt: str) -> dict:
    """A file of ``save_sealed`` whose ``format`` is ``fmt``, its checksum verified; every defect
    is a ``DataFormatError`` (or ``ValueError`` of the loader) naming the file. ``what`` names
    the file's role in messages."""
    from ivln_ce.models.official_weights import read_checkpoint

    path = Path(path)
    size = path.stat().st_size  # FileNotFoundError names the path
    if size > MAX_CHECKPOINT_BYTES:
        raise DataFormatError(f"{path}: {size:,} bytes, more than the {MAX_CHECKPOINT_BYTES:,} a {what} may have")
    saved = read_checkpoint(path)
    if saved.get("format") != fmt:
        raise DataFormatError(f"{path}: not a {what} of this version (format {short_repr(saved.get('format'))}, "
                              f"expected {fmt!r})")
    stored = saved.get(CHECKSUM_KEY)
    if not isinstance(stored, str):
        raise DataFormatError(f"{path}: a {what} without a checksum (damaged, or written by another program or version)")
    body = {k: v for k, v in saved.items() if k != CHECKSUM_KEY}
    try:
        actual = content_digest(body)
    except ValueError as exc:
        raise DataFormatError(f"{path}: damaged {what} ({exc})") from None
    if actual != stored:
        raise DataFormatError(f"{path}: damaged {what}: its content does not match its checksum")
    return body


def check_tensors(state: Any, path: str | Path, field: str) -> dict[str, torch.Tensor]:
    """``state`` as a dict of finite floating-point or integer tensors (``field`` names it)."""
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise DataFormatError(f"{path}: field {field}: expected a dict of named tensors, got {type(state).__name__}")
    for k, v in state.items():
        if not isinstance(v, torch.Tensor):
            raise DataFormatError(f"{path}: field {field}.{k}: expected a tensor, got {type(v).__name__}")
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise DataFormatError(f"{path}: field {field}.{k}: values that are not finite (NaN or infinite)")
    return state
