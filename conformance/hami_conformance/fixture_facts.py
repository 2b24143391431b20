"""Readings as the fake vendor libraries' node fixtures state them: the independent facts the suite
compares a built-in adapter's monitor() with on its fake hardware back end (``Profile.facts``).

The fixture is the fake library's own state, read here from its file, never through the adapter's
binding objects.  NVML (``[gpu]`` blocks) and CNDev (``[mlu]`` blocks) key their devices by a uuid the
adapter reports (CNDev's behind the adapter's ``MLU-`` prefix).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from hami_devices.adapter import VendorAdapter
from hami_devices.device import Device

FactsReader = Callable[[Device], "Mapping[str, object] | None"]
"""A device's readings as an independent source states them (Metrics field -> value); None: unknown device."""


def fixture_blocks(path: Path, header: str) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line == header:
            blocks.append({})
        elif blocks and "=" in line:
            key, _, value = line.partition("=")
            blocks[-1][key.strip()] = value.strip()
    return blocks


def _nvml(block: dict[str, str]) -> dict[str, object]:
    return {
        "memory_used_mib": float(block.get("used_mib", "0")),
        "utilization_pct": float(block.get("util", "0").split()[0]),
        "temperature_c": float(block.get("temp", "40")),
        "power_w": int(block.get("power_mw", "60000")) / 1000,
    }


def _cndev(block: dict[str, str]) -> dict[str, object]:
    return {
        "memory_used_mib": float(block["memory_used_mb"]),
        "utilization_pct": float(block["util"]),
        "temperature_c": float(block["temp"]),
        "power_w": float(block["power"]),
    }


_FIXTURES: dict[str, tuple[str, str, Callable[[dict[str, str]], dict[str, object]]]] = {
    # vendor: (fixture variable of its fake library, block header, readings of one block)
    "nvidia": ("HAMI_FAKE_NVML_FIXTURE", "[gpu]", _nvml),
    "cambricon": ("HAMI_FAKE_CNDEV_FIXTURE", "[mlu]", _cndev),
}


def fixture_facts(adapter: VendorAdapter) -> FactsReader | None:
    """For a built-in vendor on its fake library with a node fixture: that fixture's readings."""
    known = _FIXTURES.get(adapter.name)
    if known is None or not os.environ.get(known[0]):
        return None
    variable, header, readings = known
    path = Path(os.environ[variable])
    by_uuid = {b["uuid"]: readings(b) for b in fixture_blocks(path, header) if "uuid" in b}

    def read(device: Device) -> Mapping[str, object] | None:
        for uuid, facts in by_uuid.items():
            if device.uuid == uuid or device.uuid.endswith(f"-{uuid}"):
                return facts
        return None

    return read
