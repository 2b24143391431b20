"""The Example Accelerator's "driver": a simulated device table.

A real plugin would bind the vendor's library here (ctypes, cffi or a Python
SDK) and keep that binding in this one module.  This one simulates it: the
number of devices comes from ``HAMI_EXAMPLE_DEVICES`` (unset: no hardware).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

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


def enumerate_devices(count: int) -> list[RawDevice]:
    return [
        RawDevice(
            index=i, serial=f"EXA{i:05d}", model=MODELS[i % len(MODELS)], memory_mib=MEMORY[MODELS[i % len(MODELS)]]
        )
        for i in range(count)
    ]


def temperature_c(index: int, load_pct: float) -> float:
    """A plausible reading: idle at 34 C, warming with load."""
    return round(34.0 + 0.4 * load_pct + index * 0.5, 1)


def power_w(model: str, load_pct: float) -> float:
    idle, peak = (25.0, 150.0) if model == "EX-1" else (40.0, 300.0)
    return round(idle + (peak - idle) * load_pct / 100.0, 1)
