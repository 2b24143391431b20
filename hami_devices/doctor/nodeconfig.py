"""The per-node settings (``node-config``) this node ends up with: each device's split count, the memory
and cores that may be granted on it, and the devices the configuration keeps out of use."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from hami_devices.accounting import device_core_capacity, device_memory_capacity
from hami_devices.config import HamiConfig
from hami_devices.discovery import discover
from hami_devices.doctor.report import Check, passed, warned
from hami_devices.errors import HamiError
from hami_devices.nodeconfig import settings_for
from hami_devices.registry import VendorRegistry


def node_config_check(config: HamiConfig, registry: VendorRegistry, inventory: Path | None = None) -> Check | None:
    """None when there is no ``node-config``; else the effective values on each node found (the hardware
    here, or ``inventory``'s nodes)."""
    if not config.node_config:
        return None
    try:
        devices = discover(inventory, config=config, registry=registry)
        unfiltered = discover(inventory, config=config.model_copy(update={"node_config": []}), registry=registry)
    except HamiError as exc:
        return warned("config.node-config", f"could not find the devices to apply node-config to: {exc}",
                      "check the vendor libraries (or the inventory) above")
    kept = {d.uuid for d in devices}
    nodes: dict[str, dict[str, Any]] = defaultdict(lambda: {"devices": {}, "filtered": []})
    labels: dict[str, dict[str, str]] = {}
    for device in unfiltered:
        info = device.info
        labels[info.node] = dict(device.host.labels) if device.host is not None else {}
        if info.uuid not in kept:
            nodes[info.node]["filtered"].append(info.uuid)
    for device in devices:
        info, adapter = device.info, device.adapter
        nodes[info.node]["devices"][info.uuid] = {
            "model": info.model,
            "split-count": info.split_count,
            "memory-mib": device_memory_capacity(info, adapter.memory_factor),
            "cores": device_core_capacity(info, adapter.core_capacity),
        }
    selected = []
    for node, found in sorted(nodes.items()):
        named = node  # discovery named hardware devices' node (node_identity)
        found["name"] = named
        settings = settings_for(config, named, labels.get(node))
        found["settings"] = settings.to_dict()
        if settings.entries:
            selected.append(node)
    where = f"the nodes of {inventory}" if inventory else "this node"
    if not selected:
        names = ", ".join(sorted(nodes)) or "none"
        return warned("config.node-config", f"no node-config entry selects {where} ({names})",
                      "check the entries' name patterns and labels", nodes=dict(nodes))
    lines = []
    for node in selected:
        s = nodes[node]["settings"]
        lines.append(f"{nodes[node]['name']}: memory-scaling {s['memory-scaling']:g}, "
                     f"core-scaling {s['core-scaling']:g}, split-count {s['split-count'] or 'the device default'}, "
                     f"{len(nodes[node]['filtered'])} device(s) filtered")
    return passed("config.node-config", "; ".join(lines), nodes=dict(nodes))
