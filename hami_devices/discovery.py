"""Finding devices: through the vendor libraries, or from an inventory file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hami_devices.config import HamiConfig
from hami_devices.device import Device, HostResources
from hami_devices.errors import DeviceUnavailable
from hami_devices.inventory import Inventory, load_inventory
from hami_devices.ledger import Ledger, MemoryLedger
from hami_devices.models import DeviceInfo, DeviceTraits
from hami_devices.node_identity import node_name
from hami_devices.nodeconfig import configure_devices, configure_inventory
from hami_devices.registry import VendorRegistry, load_vendors, safe_probe


def discover(
    inventory: str | Path | Inventory | None = None,
    *,
    vendors: Iterable[str] | None = None,
    config: HamiConfig | None = None,
    ledger: Ledger | None = None,
    registry: VendorRegistry | None = None,
    node: str | None = None,
) -> list[Device]:
    """Every device the loaded adapters find.

    With ``inventory`` the adapters run on the simulated back end built from it (its
    nodes name the devices); without, each adapter whose library is present asks its
    hardware, and the devices are on this node: ``node``, else the configuration's
    ``node-name``, else ``NODE_NAME``, else the host's name (``node_identity``).  A vendor
    whose library is absent contributes nothing (``hami-devices vendors`` says why).
    The configuration's ``node-config`` applies either way: filtered devices are left
    out, and the node's scaling and split count are set on the others.
    """
    registry = registry or load_vendors(vendors, config)
    config = config or HamiConfig()
    ledger = ledger or MemoryLedger()
    devices: list[Device] = []
    if inventory is not None:
        inv = inventory if isinstance(inventory, Inventory) else load_inventory_for(inventory, registry, config)
        inv = configure_inventory(inv, config)
        for spec in inv.nodes:
            host = HostResources(spec.cpu_milli, spec.memory_mib, dict(spec.labels), list(spec.taints))
            by_vendor: dict[str, list[DeviceInfo]] = {}
            for info in spec.devices:
                by_vendor.setdefault(info.vendor, []).append(info)
            made: list[Device] = []
            for vendor, infos in by_vendor.items():
                if vendor not in registry.adapters:
                    reason = registry.failures.get(vendor)
                    detail = reason.error if reason else "no adapter is registered for it"
                    raise DeviceUnavailable(f"inventory node {spec.name!r} has {vendor} devices: {detail}")
                made.extend(registry.adapters[vendor].simulate(infos, ledger))
            order = {info.uuid: i for i, info in enumerate(spec.devices)}
            for device in sorted(made, key=lambda d: order[d.uuid]):  # the inventory's order, whatever the vendors
                device.host = host
                devices.append(device)
        return devices
    for adapter in registry.adapters.values():
        if safe_probe(adapter).available:
            devices.extend(adapter.discover(ledger))
    if devices:
        here = node_name(node, config)
        for device in devices:
            device.name_node(here)
    return _configured(devices, config)


def _configured(devices: list[Device], config: HamiConfig) -> list[Device]:
    """Hardware devices with ``node-config`` applied (the node named by ``node_identity``)."""
    if not config.node_config:
        return devices
    by_node: dict[str, list[Device]] = {}
    for device in devices:
        by_node.setdefault(device.info.node, []).append(device)
    kept: set[str] = set()
    for node, members in by_node.items():
        for info in configure_devices(config, node, [d.info for d in members]):
            device = next(d for d in members if d.uuid == info.uuid)
            device.reconfigure(info)
            kept.add(info.uuid)
    return [d for d in devices if d.uuid in kept]


def load_inventory_for(path: str | Path, registry: VendorRegistry, config: HamiConfig | None = None) -> Inventory:
    """Load an inventory with the configured split count and the loaded vendors' own traits."""

    def traits_for(vendor: str, model: str) -> DeviceTraits | None:
        adapter = registry.adapters.get(vendor)
        return adapter.traits_for(model) if adapter is not None else None

    config = config or HamiConfig()
    inventory = load_inventory(path, split_count_default=config.device_plugin.split_count, traits_for=traits_for)
    return configure_inventory(inventory, config)


def complete_inventory(inventory: Inventory, registry: VendorRegistry) -> Inventory:
    """The inventory with each device completed by its vendor adapter (partition catalog ...).

    The scheduling engine works on ``DeviceInfo`` alone; this gives it the same
    facts the simulated devices of ``discover`` have.
    """
    nodes = []
    for node in inventory.nodes:
        devices = []
        for info in node.devices:
            if info.vendor not in registry.adapters:
                failure = registry.failures.get(info.vendor)
                detail = failure.error if failure else "no adapter is registered for it"
                raise DeviceUnavailable(f"inventory node {node.name!r} has {info.vendor} devices: {detail}")
            devices.append(registry.adapters[info.vendor].complete_info(info))
        nodes.append(node.model_copy(update={"devices": devices}))
    return inventory.model_copy(update={"nodes": nodes})
