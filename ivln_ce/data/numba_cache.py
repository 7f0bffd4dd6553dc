"""``cached_jit``: numba compilation cached on disk, falling back to memory where it cannot be.

A compiled kernel costs about a second to build; cached, a new process loads it in a fraction
of that. numba writes the cache beside the source file when that folder is writable, else
under ``NUMBA_CACHE_DIR`` or the user's cache folder. Where none is writable (a read-only
install with no home folder) numba refuses ``cache=True`` at decoration time; the kernels are
then compiled in memory at every start, with one warning, never an error.
"""

from __future__ import annotations

import warnings

from numba import njit

_uncached: list[str] = []


def cached_jit(fn):
    """``njit(cache=True, nogil=True)``, or without the disk cache where none can be written."""
    try:
        return njit(cache=True, nogil=True)(fn)
    except RuntimeError as exc:  # numba: "cannot cache function ...: no locator available"
        if "cannot cache" not in str(exc):
            raise
        if not _uncached:
            warnings.warn("numba has no writable cache folder (set NUMBA_CACHE_DIR): kernels are "
                          "compiled in memory at every start", stacklevel=2)
        _uncached.append(fn.__qualname__)
        return njit(nogil=True)(fn)
