"""The Example Accelerator's "driver": a simulated device table.

A real plugin would bind the vendor's library here (ctypes, cffi or a Python
SDK) and keep that binding in this one module.  This one simulates it: the
number of devices comes from ``HAMI_EXAMPLE_DEVICES`` (unset: no hardware).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

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


ERROR_GONE = 3
"""The driver's code for a device that fell off the bus."""
ERROR_FAILED = 5
"""The driver's code for a call that failed (a hung or restarting driver)."""


class DriverError(Exception):
    """A driver call failed with the driver's own code."""

    def __init__(self, function: str, code: int, serial: str) -> None:
        super().__init__(f"{function}({serial}) failed with code {code}")
        self.function = function
        self.code = code


@dataclass
class Faults:
    """Faults the driver shows from now on, by device serial: what a test (the conformance suite's
    fault injector) makes happen to the hardware."""

    unhealthy: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    failing: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def inject(self, serial: str, fault: str) -> None:
        with self.lock:
            {"unhealthy": self.unhealthy, "gone": self.gone, "failing": self.failing}[fault].add(serial)

    def clear(self) -> None:
        with self.lock:
            self.unhealthy.clear()
            self.gone.clear()
            self.failing.clear()


FAULTS = Faults()


def enumerate_devices(count: int) -> list[RawDevice]:
    devices = []
    for i in range(count):
        serial, model = f"EXA{i:05d}", MODELS[i % len(MODELS)]
        if serial in FAULTS.gone:
            continue
        healthy = serial not in FAULTS.unhealthy and serial not in FAULTS.failing
        devices.append(RawDevice(index=i, serial=serial, model=model, memory_mib=MEMORY[model], healthy=healthy))
    return devices


def healthy(serial: str) -> bool:
    """The device's health as the driver reports it now; DriverError when the call fails."""
    if serial in FAULTS.gone:
        raise DriverError("health", ERROR_GONE, serial)
    if serial in FAULTS.failing:
        raise DriverError("health", ERROR_FAILED, serial)
    return serial not in FAULTS.unhealthy


def temperature_c(index: int, load_pct: float) -> float:
    """A plausible reading: idle at 34 C, warming with load."""
    return round(34.0 + 0.4 * load_pct + index * 0.5, 1)


def power_w(model: str, load_pct: float) -> float:
    idle, peak = (25.0, 150.0) if model == "EX-1" else (40.0, 300.0)
    return round(idle + (peak - idle) * load_pct / 100.0, 1)
