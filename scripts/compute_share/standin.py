"""A CPU stand-in for one GPU stream, for ``--selftest``: launches cost host time, kernels queue on a virtual
stream that runs them back to back on the host's clock, events are stamped when the work before them ends.

It enforces nothing and shares nothing between processes (each process has its own stream), so it exercises
the check's orchestration, environment, JSON and arithmetic, never the limiter.  The durations are the orders
of magnitude of issue 36's H200 table, for realistic shapes only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

LAUNCH_S = 5e-6  # host time of one launch (issue 36: ~5-7 us per tiny launch on the H200)
KERNEL_S = {"tiny": 2e-6, "medium": 55e-6, "big": 2.7e-3}
DECODE_KERNELS = 200  # launches per token of the torch decoder, about (8 layers of ~25 kernels, then the head)
MAX_QUEUED_S = 0.2  # a launch blocks while this much work is already queued, as a full CUDA stream does


class StandInEvent:
    def __init__(self, device: StandInDevice) -> None:
        self._device = device
        self._at = 0.0

    def record(self) -> None:
        self._at = max(time.perf_counter(), self._device.free_at)

    def synchronize(self) -> None:
        _sleep_until(self._at)

    def elapsed_s(self, end: Any) -> float:
        return float(end._at - self._at)


class StandInDecoder:
    def __init__(self, device: StandInDevice) -> None:
        self._launch = device.launcher("tiny")
        self._device = device
        self._count = 0

    def reset(self) -> None:
        self._count = 0

    def step(self) -> None:
        for _ in range(DECODE_KERNELS):
            self._launch()
        self._count += 1

    def token(self) -> int:
        self._device.synchronize()
        return self._count % 8192


class StandInDevice:
    def __init__(self) -> None:
        self.free_at = 0.0

    def _enqueue(self, seconds: float) -> None:
        now = _spin_for(LAUNCH_S)
        self.free_at = max(now, self.free_at) + seconds
        if self.free_at - now > MAX_QUEUED_S:
            _sleep_until(self.free_at - MAX_QUEUED_S)

    def launcher(self, kind: str) -> Callable[[], None]:
        seconds = KERNEL_S[kind]
        return lambda: self._enqueue(seconds)

    def spin(self, seconds: float) -> None:
        self._enqueue(seconds)

    def event(self) -> StandInEvent:
        return StandInEvent(self)

    def synchronize(self) -> None:
        _sleep_until(self.free_at)

    def decoder(self) -> StandInDecoder:
        return StandInDecoder(self)

    def describe(self) -> dict[str, Any]:
        return {"backend": "stand-in", "gpu": "CPU stand-in (no GPU)", "torch": None, "cuda_runtime": None}


def _spin_for(seconds: float) -> float:
    end = time.perf_counter() + seconds
    now = time.perf_counter()
    while now < end:
        now = time.perf_counter()
    return now


def _sleep_until(t: float) -> None:
    left = t - time.perf_counter()
    if left > 0:
        time.sleep(left)
