"""Small builders for core tests: inventories written as Python data."""

from __future__ import annotations

from typing import Any

from hami_devices import Device, discover
from hami_devices.config import HamiConfig
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import Ledger, MemoryLedger


def node(name: str, *groups: dict[str, Any], cpu: int = 64_000, mem: int = 262_144) -> dict[str, Any]:
    return {"name": name, "cpu_milli": cpu, "memory_mib": mem, "devices": list(groups)}


def simulated(
    *nodes: dict[str, Any], ledger: Ledger | None = None, config: HamiConfig | None = None
) -> list[Device]:
    return discover(parse_inventory({"nodes": list(nodes)}), ledger=ledger or MemoryLedger(), config=config)
