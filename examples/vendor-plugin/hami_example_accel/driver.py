"""The Example Accelerator's "driver": a simulated device table.

A real plugin would bind the vendor's library here (ctypes, cffi or a Python
SDK) and keep that binding in this one module.  This one simulates the device
table: the number of devices comes from ``HAMI_EXAMPLE_DEVICES`` (unset: no
hardware); each device's health is asked of the Example Runtime (libexrt.so,
through ctypes), whose fault hook lets a test make a device go bad mid-run.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

DEVICES_ENV = "HAMI_EXAMPLE_DEVICES"
MODELS = ("EX-1", "EX-1", "EX-2", "EX-2")


@dataclass(frozen=True)
class RawDevice:
    """What the driver says about one device, in the vendor's own terms."""

    index: int
    serial: str
    model: str
    memory_mib: int
    healthy: bool = True


MEMORY = {"EX-1": 32768, "EX-2": 65536}


def device_count() -> int | None:
    """Devices the simulated driver reports; None when the driver is "not installed"."""
    value = os.environ.get(DEVICES_ENV)
    if value is None:
        return None
    try:
        return max(0, int(value))
    except ValueError:
        return None


ERROR_GONE = 4
"""The runtime's code for a device that fell off the bus (EXRT_ERROR_DEVICE_LOST, native/exrt.h)."""
ERROR_FAILED = 5
"""The runtime's code for a call that failed, a hung or restarting driver (EXRT_ERROR_UNKNOWN)."""

FAULTS_ENV = "EXRT_FAULTS"
"""Names the control file of faults the Example Runtime shows (its fault hook, native/exrt.h)."""

LIBS = "libs"
"""Where this package's pip install puts its shared libraries (setup.py)."""


def library(name: str) -> Path:
    """A shared library this package built (the limiter shim, the Example Runtime)."""
    return Path(str(resources.files("hami_example_accel").joinpath(LIBS, name)))


class DriverError(Exception):
    """A runtime call failed with the runtime's own code."""

    def __init__(self, function: str, code: int, device: int) -> None:
        super().__init__(f"{function}({device}) failed with code {code}")
        self.function = function
        self.code = code


@functools.cache
def _runtime() -> ctypes.CDLL:
    runtime = ctypes.CDLL(str(library("libexrt.so")))
    runtime.exrtDeviceGetHealth.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_int))
    runtime.exrtDeviceGetHealth.restype = ctypes.c_int
    return runtime


def healthy(index: int) -> bool:
    """The device's health as the runtime reports it now; DriverError when the call fails."""
    answer = ctypes.c_int(0)
    code = _runtime().exrtDeviceGetHealth(index, ctypes.byref(answer))
    if code != 0:
        raise DriverError("exrtDeviceGetHealth", code, index)
    return bool(answer.value)


def enumerate_devices(count: int) -> list[RawDevice]:
    """The devices that answer; one whose health call fails is listed unhealthy."""
    devices = []
    for i in range(count):
        serial, model = f"EXA{i:05d}", MODELS[i % len(MODELS)]
        try:
            fit = healthy(i)
        except DriverError as exc:
            if exc.code == ERROR_GONE:
                continue
            fit = False
        devices.append(RawDevice(index=i, serial=serial, model=model, memory_mib=MEMORY[model], healthy=fit))
    return devices


def temperature_c(index: int, load_pct: float) -> float:
    """A plausible reading: idle at 34 C, warming with load."""
    return round(34.0 + 0.4 * load_pct + index * 0.5, 1)


def power_w(model: str, load_pct: float) -> float:
    idle, peak = (25.0, 150.0) if model == "EX-1" else (40.0, 300.0)
    return round(idle + (peak - idle) * load_pct / 100.0, 1)
