"""Progress of long commands, on a terminal and in a log.

On a terminal ``bar`` is tqdm's usual bar. When standard error is not a terminal (a log file,
a pipe, a batch scheduler) tqdm would either stay silent or rewrite one line with carriage
returns; ``bar`` then writes whole lines instead, one at least every ``IVLN_PROGRESS_SECONDS``
seconds (30 by default) while the work runs, even when no unit finishes in that time:
``desc: done/total [elapsed<eta, rate]``.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import IO, Any, Iterable

from tqdm import tqdm

#: seconds between two progress lines in a log (environment variable, for tests and schedulers)
INTERVAL_ENV = "IVLN_PROGRESS_SECONDS"
DEFAULT_INTERVAL = 30.0


def _interval() -> float:
    try:
        value = float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if 0 < value < 1e6 else DEFAULT_INTERVAL


def _is_terminal(file: IO) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):
        return False


class _Lines:
    """A file that lets whole lines through and drops tqdm's bare carriage returns and newlines."""

    def __init__(self, file: IO):
        self.file = file

    def write(self, text: str) -> None:
        if text.strip("\r\n "):
            self.file.write(text)

    def flush(self) -> None:
        self.file.flush()


class LineProgress(tqdm):
    """tqdm that prints one full line per refresh, and refreshes on a timer too."""

    @staticmethod
    def status_printer(file):
        def print_status(text: str) -> None:
            text = text.strip()
            if text:
                file.write(text + "\n")
                file.flush()

        return print_status

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("mininterval", _interval())
        kwargs.setdefault("ascii", True)
        kwargs.setdefault("ncols", 0)  # no bar graphic: counts, times and rate only
        kwargs["file"] = _Lines(kwargs.get("file") or sys.stderr)
        super().__init__(*args, **kwargs)
        self._stop = threading.Event()
        if not self.disable:
            threading.Thread(target=self._beat, name="ivln-progress", daemon=True).start()

    def _beat(self) -> None:
        period = float(self.mininterval)
        while not self._stop.wait(period):
            if self._time() - self.last_print_t >= period * 0.95:
                self.refresh()

    def close(self) -> None:
        self._stop.set()
        super().close()


def bar(iterable: Iterable | None = None, *, desc: str = "", total: int | None = None, unit: str = "it",
        initial: int = 0, disable: bool = False, file: IO | None = None, leave: bool = True) -> tqdm:
    """A progress bar on a terminal, progress lines elsewhere (see the module docstring)."""
    file = file if file is not None else sys.stderr
    cls = tqdm if _is_terminal(file) else LineProgress
    return cls(iterable, desc=desc, total=total, unit=unit, initial=initial, disable=bool(disable), file=file, leave=leave)
