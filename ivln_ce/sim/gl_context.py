"""Headless OpenGL contexts that can share a process with triton (and so with torch).

Mesa's software rasteriser (llvmpipe) loads its own LLVM when an EGL context is created.
triton's ``libtriton.so`` carries another LLVM; loading it *after* llvmpipe crashes the
process (SIGSEGV), loading it *before* is safe. torch imports triton lazily (``torch._dynamo``,
reached from ``torch.optim`` or ``torch.compile``), so a process that renders and then trains
would die at its first optimizer. Every context of the project is therefore created here, and
this one place loads the LLVM users that are installed before Mesa can load its LLVM. Worker
processes of the rollout engine never import torch at all; this guard covers the processes
that must both render and run torch (``train-rednet``, ``known-maps --rednet``, the demo).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys

log = logging.getLogger(__name__)

#: Python packages that load their own LLVM and must be loaded before Mesa's.
LLVM_USERS = ("triton",)


def preload_llvm_users() -> list[str]:
    """Import every installed package of ``LLVM_USERS`` not yet imported; returns their names."""
    loaded = []
    for name in LLVM_USERS:
        if name in sys.modules:
            continue
        try:
            if importlib.util.find_spec(name) is None:
                continue
            importlib.import_module(name)
        except Exception as exc:  # a broken install: torch would not load it either
            log.warning("could not preload %s before creating an EGL context (%s); continuing", name, exc)
            continue
        loaded.append(name)
    return loaded


def create_context(backend: str = "egl", device_index: int | None = None):
    """A standalone moderngl context, created after the LLVM users are loaded.

    ``device_index`` picks the EGL device (one GPU per torchrun rank); ``None`` or 0 uses the
    driver's default display. If the device cannot be opened (e.g. a CPU machine whose only
    EGL device is Mesa's), the default display is used and a warning says so."""
    preload_llvm_users()
    import moderngl

    if device_index:
        try:
            return moderngl.create_standalone_context(backend=backend, device_index=int(device_index))
        except Exception as exc:
            log.warning("EGL device %d could not be opened (%s); rendering on the default EGL display", device_index, exc)
    return moderngl.create_standalone_context(backend=backend)


_SHARED: dict[tuple[str, int], tuple[int, object]] = {}


def shared_context(backend: str = "egl", device_index: int | None = None):
    """One context per process and device, shared by every renderer of the process (the
    environments of one rollout worker): creating an EGL context costs tens of milliseconds and
    a driver's memory each. A forked child never reuses its parent's context."""
    key = (backend, int(device_index or 0))
    hit = _SHARED.get(key)
    if hit is not None and hit[0] == os.getpid():
        return hit[1]
    ctx = create_context(backend, device_index)
    _SHARED[key] = (os.getpid(), ctx)
    return ctx
