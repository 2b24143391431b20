"""Per-node settings (``node-config``): which entries select a node, and the devices they leave it.

HAMi's ``nodeconfig`` gives a node its own device memory scaling, split count and
core scaling, and keeps some of its devices out of use; here an entry may also set the
node's MIG mode (``mig-mode``).  An entry selects nodes by a name pattern and/or labels;
the settings are written into each device's facts (``DeviceInfo.memory_factor``, ``core_capacity``, ``split_count``),
so every consumer of the rule table -- the engine's columns, the allocator's
re-check, DRA, Ray -- reads them without knowing where they came from.  Applying
the same configuration twice gives the same devices, so every path that builds
devices (discovery on hardware, an inventory, an engine) may apply it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from hami_devices import accounting
from hami_devices.config import DeviceFilter, HamiConfig, NodeConfig
from hami_devices.inventory import MIG_MODE_ATTRIBUTE, Inventory
from hami_devices.models import DeviceInfo
from hami_devices.traits import normalize_model_name


@dataclass
class NodeSettings:
    """What the configuration gives one node: each value, and the entries it came from."""

    memory_scaling: float
    core_scaling: float
    split_count: int | None  # None: each device keeps its own (the vendor's or the inventory's)
    mig_mode: str | None = None  # None: each device keeps its own (the inventory's, else device-plugin.mig-mode)
    filters: list[DeviceFilter] = field(default_factory=list)
    entries: list[int] = field(default_factory=list)  # indexes into node-config that select the node

    def excludes(self, info: DeviceInfo) -> bool:
        model = normalize_model_name(info.model)
        aliases = {model}
        if info.traits is not None:
            aliases |= {normalize_model_name(a) for a in (info.traits.model, *info.traits.aliases)}
        for f in self.filters:
            if info.uuid in f.uuids or info.index in f.indexes:
                return True
            if any(normalize_model_name(m) in aliases for m in f.models):
                return True
        return False

    def to_dict(self) -> dict[str, object]:
        return {
            "entries": self.entries,
            "memory-scaling": self.memory_scaling,
            "core-scaling": self.core_scaling,
            "split-count": self.split_count,
            "mig-mode": self.mig_mode,
            "filter-devices": [f.model_dump(exclude_defaults=True) for f in self.filters],
        }


def selects(entry: NodeConfig, node: str, labels: Mapping[str, str]) -> bool:
    if entry.name is not None and not fnmatchcase(node, entry.name):
        return False
    return all(labels.get(k) == v for k, v in entry.labels.items())


def settings_for(config: HamiConfig, node: str, labels: Mapping[str, str] | None = None) -> NodeSettings:
    """The effective settings of ``node``: the device-plugin's, overridden by each entry that selects it."""
    plugin = config.device_plugin
    out = NodeSettings(plugin.memory_scaling, plugin.core_scaling, None)
    for i, entry in enumerate(config.node_config):
        if not selects(entry, node, labels or {}):
            continue
        out.entries.append(i)
        out.memory_scaling = entry.memory_scaling if entry.memory_scaling is not None else out.memory_scaling
        out.core_scaling = entry.core_scaling if entry.core_scaling is not None else out.core_scaling
        out.split_count = entry.split_count if entry.split_count is not None else out.split_count
        out.mig_mode = entry.mig_mode if entry.mig_mode is not None else out.mig_mode
        out.filters.append(entry.filter_devices)
    return out


def configure_devices(
    config: HamiConfig, node: str, infos: Sequence[DeviceInfo], labels: Mapping[str, str] | None = None
) -> list[DeviceInfo]:
    """``infos`` of ``node`` as the configuration leaves them: filtered devices gone, the node's settings set.

    Nothing changes on a node no entry selects (the vendor rule's memory factor and core capacity apply).
    """
    if not config.node_config:
        return list(infos)
    settings = settings_for(config, node, labels)
    if not settings.entries:
        return list(infos)
    scaled = config.model_copy(
        update={"device_plugin": config.device_plugin.model_copy(
            update={"memory_scaling": settings.memory_scaling, "core_scaling": settings.core_scaling})}
    )
    update: dict[str, object] = {
        "memory_factor": accounting.memory_factor(scaled),
        "core_capacity": accounting.core_capacity(scaled),
    }
    if settings.split_count is not None:
        update["split_count"] = settings.split_count
    kept = [info for info in infos if not settings.excludes(info)]
    if settings.mig_mode is None:
        return [info.model_copy(update=update) for info in kept]
    return [
        info.model_copy(update={**update, "attributes": {**info.attributes, MIG_MODE_ATTRIBUTE: settings.mig_mode}})
        for info in kept
    ]


def configure_inventory(inventory: Inventory, config: HamiConfig) -> Inventory:
    """The inventory with ``node-config`` applied to every node (by its name and labels)."""
    if not config.node_config:
        return inventory
    nodes = [
        node.model_copy(update={"devices": configure_devices(config, node.name, node.devices, node.labels)})
        for node in inventory.nodes
    ]
    return inventory.model_copy(update={"nodes": nodes})
