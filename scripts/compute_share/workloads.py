"""The measurements one process makes on its device: a kernel stream's completion log, a kernel's device time,
the host time of a launch, and decode speed.

Completion times come from the device: each batch ends with an event, and its time is a reference event's host
time plus the device's elapsed time between the two, so a host delayed in a launch (a limiter pacing it) does not
move a completion.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from .device import Device, Event

BATCH = {"tiny": 64, "medium": 16, "big": 1}  # kernels per event: ~0.4, ~1 and ~2.7 ms of work at bare on an H200
BURST = {"tiny": 512, "medium": 128, "big": 12}  # kernels queued behind the spin kernel (under CUDA's queue depth)
IN_FLIGHT = 3  # batches queued ahead of the one the host waits for, so the stream never runs dry at a wait


def _reference(device: Device) -> tuple[Event, float]:
    """An event that has run, and the host-monotonic time it had run by."""
    ref = device.event()
    ref.record()
    ref.synchronize()
    return ref, time.monotonic()


def stream(device: Device, launch: Callable[[], None], batch: int, until: float) -> list[tuple[float, int]]:
    """Launch ``launch`` in batches of ``batch`` until host-monotonic time ``until``; the completion log."""
    ref, t_ref = _reference(device)
    log: list[tuple[float, int]] = [(t_ref, 0)]
    pending: deque[tuple[Event, int]] = deque()
    launched = 0

    def retire() -> None:
        event, count = pending.popleft()
        event.synchronize()
        log.append((t_ref + ref.elapsed_s(event), count))

    while time.monotonic() < until:
        for _ in range(batch):
            launch()
        launched += batch
        event = device.event()
        event.record()
        pending.append((event, launched))
        if len(pending) > IN_FLIGHT:
            retire()
    while pending:
        retire()
    return log


def device_seconds(device: Device, launch: Callable[[], None], count: int) -> float | None:
    """Device time of one launch: ``count`` launches queued behind a spin kernel run back to back, so the events
    around them time the device's work and none of the host's.  None when the host could not queue them all
    before the spin ended (the burst would then include idle gaps)."""
    spin = 0.05
    for _ in range(3):
        device.synchronize()
        spin_start, burst_start, burst_end = device.event(), device.event(), device.event()
        spin_start.record()
        device.spin(spin)
        burst_start.record()
        host = time.perf_counter()
        for _ in range(count):
            launch()
        host = time.perf_counter() - host
        burst_end.record()
        burst_end.synchronize()
        if host < 0.8 * spin_start.elapsed_s(burst_start):
            return burst_start.elapsed_s(burst_end) / count
        spin = 2 * max(spin, host)
    return None


def launch_seconds(device: Device, launch: Callable[[], None], rounds: int = 5, count: int = 2000) -> float:
    """Host time of one launch of a tiny kernel: the least of ``rounds`` timed runs of ``count`` launches (the
    least, because interruptions only ever add time)."""
    best = float("inf")
    for _ in range(rounds):
        device.synchronize()
        start = time.perf_counter()
        for _ in range(count):
            launch()
        best = min(best, (time.perf_counter() - start) / count)
    device.synchronize()
    return best


def decode_log(device_decode_step: Callable[[], None], read_token: Callable[[], int],
               until: float) -> list[tuple[float, int]]:
    """Greedy generation, one host read per token, until ``until``; a completion log of tokens."""
    log = [(time.monotonic(), 0)]
    tokens = 0
    while time.monotonic() < until:
        device_decode_step()
        read_token()
        tokens += 1
        log.append((time.monotonic(), tokens))
    return log
