"""What a driver would apply: the DeviceClasses and each node's ResourceSlices, from an inventory or discovery."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hami_devices.config import HamiConfig
from hami_devices.errors import InvalidRequest
from hami_devices.inventory import Inventory
from hami_devices.kubernetes.dra.classes import device_classes
from hami_devices.kubernetes.dra.slices import PoolPublisher
from hami_devices.registry import VendorRegistry, load_vendors


def publish_inventory(
    inventory: str | Path | Inventory,
    config: HamiConfig | None = None,
    *,
    node: str | None = None,
    registry: VendorRegistry | None = None,
    generation: int = 0,
    kubernetes: str | None = None,
) -> list[dict[str, Any]]:
    """DeviceClasses, then the ResourceSlices of every node (or of ``node``), devices completed by their adapters,
    cut into slices by the rules of Kubernetes release ``kubernetes`` (default: 1.35 and newer)."""
    from hami_devices.discovery import complete_inventory, load_inventory_for

    config = config or HamiConfig()
    registry = registry or load_vendors(config=config)
    if not isinstance(inventory, Inventory):
        inventory = load_inventory_for(inventory, registry, config)
    inventory = complete_inventory(inventory, registry)
    nodes = [n for n in inventory.nodes if node is None or n.name == node]
    if not nodes:
        raise InvalidRequest("node", f"no node {node!r} in the inventory")
    vendors: Sequence[str] = sorted({d.vendor for n in nodes for d in n.devices})
    out = device_classes(vendors)
    for spec in nodes:
        publisher = PoolPublisher(spec.name, generation=generation, kubernetes=kubernetes)
        out.extend(publisher.publish(spec.devices, registry.adapters))
    return out
