"""The fake runtimes' shared state (native/include/hami_fake_gpu.h), read for tests and the bench."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

from hami_devices.errors import LimiterError
from hami_devices.limiter.paths import fake_library

FAKE_GPU_MAGIC = 0x31414746494D4148
FAKE_GPU_VERSION = 4
FAKE_MAX_DEVICES = 16
FAKE_MAX_PROCS = 64
FAKE_BREAKS = 64
PTHREAD_MUTEX_BYTES = 40  # glibc's pthread_mutex_t on the 64-bit targets this builds for


class _FakeProc(ctypes.Structure):
    _fields_ = (
        ("pid", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("used_bytes", ctypes.c_uint64),
        ("busy_ns", ctypes.c_uint64),
        ("launches", ctypes.c_uint64),
    )


class _FakeDevice(ctypes.Structure):
    _fields_ = (
        ("total_bytes", ctypes.c_uint64),
        ("used_bytes", ctypes.c_uint64),
        ("peak_used_bytes", ctypes.c_uint64),
        ("busy_ns", ctypes.c_uint64),
        ("advanced_ns", ctypes.c_uint64),
        ("launches", ctypes.c_uint64),
        ("procs", _FakeProc * FAKE_MAX_PROCS),
        ("host_bytes", ctypes.c_uint64),
        ("host_peak_bytes", ctypes.c_uint64),
    )


class _FakeLane(ctypes.Structure):
    _fields_ = (
        ("queued_ns", ctypes.c_uint64),
        ("done_ns", ctypes.c_uint64),
        ("breaks", ctypes.c_uint64),
        ("rate_ppm", ctypes.c_uint64),
        ("ring", ctypes.c_uint64 * (2 * FAKE_BREAKS)),
    )


class _FakeTimeline(ctypes.Structure):
    _fields_ = (
        ("lock", ctypes.c_uint64 * (PTHREAD_MUTEX_BYTES // 8)),
        ("lane", _FakeLane * FAKE_MAX_PROCS),
    )


class _FakeState(ctypes.Structure):
    _fields_ = (
        ("magic", ctypes.c_uint64),
        ("version", ctypes.c_uint32),
        ("device_count", ctypes.c_uint32),
        ("size", ctypes.c_uint64),
        ("created_ns", ctypes.c_uint64),
        ("devices", _FakeDevice * FAKE_MAX_DEVICES),
        ("book_lock", ctypes.c_uint64 * (PTHREAD_MUTEX_BYTES // 8)),
        ("undo", ctypes.c_uint64 * 5),
        ("timeline", _FakeTimeline * FAKE_MAX_DEVICES),
    )


@dataclass(frozen=True)
class FakeDeviceSnapshot:
    """One fake device as the fake runtimes see it (``HAMI_FAKE_GPU_STATE``)."""

    device: int
    total_bytes: int
    used_bytes: int
    peak_used_bytes: int
    busy_ns: int
    launches: int
    process_used_bytes: dict[int, int]
    process_busy_ns: dict[int, int]
    host_bytes: int = 0  # host memory behind managed allocations (what virtual device memory spills to)
    host_peak_bytes: int = 0
    # The timeline (native/include/hami_fake_timeline.h) is played lazily: busy_ns and process_busy_ns
    # are exact up to advanced_ns (CLOCK_MONOTONIC ns, as time.monotonic_ns()), not up to the read.
    advanced_ns: int = 0
    process_queued_ns: dict[int, int] | None = None  # device time each process has queued so far


def play(path: str | Path) -> None:
    """Bring the fake devices' timelines up to now (they are played lazily, by whoever launches or waits).

    Through the fake libcuda's own player (hamiFakePlayState), so that the model is written once."""
    lib = ctypes.CDLL(str(fake_library("libcuda.so.1")))
    lib.hamiFakePlayState.argtypes = (ctypes.c_char_p,)
    lib.hamiFakePlayState(os.fsencode(path))


def fake_gpu_snapshot(path: str | Path, *, current: bool = True) -> list[FakeDeviceSnapshot]:
    """Read the fake runtimes' shared state file; raises ``LimiterError`` if it is not one.

    ``current``: play the timelines up to now first, so that busy time is exact up to the read."""
    if current and Path(path).exists():
        play(path)
    data = Path(path).read_bytes()
    if len(data) < ctypes.sizeof(_FakeState):
        raise LimiterError(f"{path}: truncated fake GPU state ({len(data)} bytes)")
    state = _FakeState.from_buffer_copy(data)
    if state.magic != FAKE_GPU_MAGIC or state.version != FAKE_GPU_VERSION:
        raise LimiterError(f"{path}: not a fake GPU state file of version {FAKE_GPU_VERSION}")
    snapshots = []
    for index in range(state.device_count):
        dev = state.devices[index]
        procs = [p for p in dev.procs if p.pid > 0]
        snapshots.append(
            FakeDeviceSnapshot(
                device=index,
                total_bytes=dev.total_bytes,
                used_bytes=dev.used_bytes,
                peak_used_bytes=dev.peak_used_bytes,
                busy_ns=dev.busy_ns,
                launches=dev.launches,
                process_used_bytes={p.pid: p.used_bytes for p in procs},
                process_busy_ns={p.pid: p.busy_ns for p in procs},
                host_bytes=dev.host_bytes,
                host_peak_bytes=dev.host_peak_bytes,
                advanced_ns=dev.advanced_ns,
                process_queued_ns={
                    p.pid: state.timeline[index].lane[slot].queued_ns
                    for slot, p in enumerate(dev.procs)
                    if p.pid > 0
                },
            )
        )
    return snapshots
