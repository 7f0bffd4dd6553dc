"""GPU utilisation sampled while a benchmark runs (NVML through nvidia-ml-py; None without it)."""

from __future__ import annotations

import threading
import time


class GPUSampler:
    """``with GPUSampler() as s: ...`` then ``s.busy`` = mean of NVML's utilisation.gpu (0-1),
    the share of sample periods in which a kernel ran on the device."""

    def __init__(self, index: int = 0, period: float = 0.05):
        self.index, self.period = index, period
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "GPUSampler":
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            self._nvml = pynvml
        except Exception:
            self._nvml = None
            return self

        def run() -> None:
            while not self._stop.is_set():
                self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
                time.sleep(self.period)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def busy(self) -> float | None:
        return sum(self.samples) / (100.0 * len(self.samples)) if self.samples else None
