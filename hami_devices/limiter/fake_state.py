"""The fake runtimes' shared state (native/include/hami_fake_gpu.h), read for tests and the bench."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

from hami_devices.errors import LimiterError

FAKE_GPU_MAGIC = 0x31414746494D4148
FAKE_GPU_VERSION = 3
FAKE_MAX_DEVICES = 16
FAKE_MAX_PROCS = 64


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
        ("busy_until_ns", ctypes.c_uint64),
        ("launches", ctypes.c_uint64),
        ("procs", _FakeProc * FAKE_MAX_PROCS),
        ("host_bytes", ctypes.c_uint64),
        ("host_peak_bytes", ctypes.c_uint64),
    )


class _FakeState(ctypes.Structure):
    _fields_ = (
        ("magic", ctypes.c_uint64),
        ("version", ctypes.c_uint32),
        ("device_count", ctypes.c_uint32),
        ("size", ctypes.c_uint64),
        ("created_ns", ctypes.c_uint64),
        ("devices", _FakeDevice * FAKE_MAX_DEVICES),
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


def fake_gpu_snapshot(path: str | Path) -> list[FakeDeviceSnapshot]:
    """Read the fake runtimes' shared state file; raises ``LimiterError`` if it is not one."""
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
            )
        )
    return snapshots
