"""Finding devices: through the vendor libraries, or from an inventory file."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_devices.config import HamiConfig
from hami_devices.device import Device, HostResources
from hami_devices.errors import DeviceUnavailable
from hami_devices.inputs import as_config, check_inventory
from hami_devices.inventory import Inventory, load_inventory
from hami_devices.ledger import Ledger, MemoryLedger
from hami_devices.ledger.served_node import record_served, served
from hami_devices.models import DeviceInfo, DeviceTraits
from hami_devices.node_identity import node_for_ledger
from hami_devices.nodeconfig import configure_devices, configure_inventory
from hami_devices.registry import VendorRegistry, load_vendors, safe_probe

log = logging.getLogger(__name__)

@dataclass
class Found:
    """The devices discovery found, and each expected vendor that contributed none because its library
    (or its plugin) cannot be loaded: vendor -> why it was expected and why it is missing."""

    devices: list[Device]
    missing: dict[str, str] = field(default_factory=dict)

    def require(self) -> None:
        """``DeviceUnavailable`` naming every missing vendor and its library, if any is missing."""
        if self.missing:
            raise DeviceUnavailable(missing_message(self.missing))


def missing_message(missing: Mapping[str, str]) -> str:
    return "; ".join(f"vendor {vendor} cannot be used: {why}" for vendor, why in sorted(missing.items()))


def find_devices(
    inventory: str | Path | Inventory | None = None,
    *,
    vendors: Iterable[str] | None = None,
    config: HamiConfig | Mapping[str, Any] | str | Path | None = None,
    ledger: Ledger | None = None,
    registry: VendorRegistry | None = None,
    node: str | None = None,
) -> Found:
    """Every device the loaded adapters find, and the expected vendors that found none (``Found``).

    With ``inventory`` the adapters run on the simulated back end built from it (its
    nodes name the devices); without, each adapter whose library is present asks its
    hardware, and the devices are on this node: ``node``, else the configuration's
    ``node-name``, else ``NODE_NAME``, else the node ``ledger`` recorded at its first use, else the host's
    name (``node_identity.node_for_ledger``: a name that differs from the recorded one is refused).  A vendor
    whose library is absent contributes nothing (``hami-devices vendors`` says why); it is ``missing``
    when it was expected: named in ``vendors``, its library named by its variable (``HAMI_NVML_LIBRARY``),
    or seen on this node before (the ledger records the vendors it saw).
    The configuration's ``node-config`` applies either way: filtered devices are left
    out, and the node's scaling and split count are set on the others.  ``config``: a
    ``HamiConfig``, a mapping of its keys or a YAML path.
    """
    config = as_config(config)
    if inventory is not None:
        inventory = check_inventory(inventory)
    registry = registry or load_vendors(vendors, config)
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
        return Found(devices)
    unusable: dict[str, str] = {}
    for name, adapter in registry.adapters.items():
        probe = safe_probe(adapter)
        if probe.available:
            devices.extend(adapter.discover(ledger))
        else:
            unusable[name] = probe.detail if not probe.library or probe.library in probe.detail else (
                f"{probe.detail} (library {probe.library})")
    for name, failure in registry.failures.items():
        unusable[name] = f"its plugin did not load: {failure.error}"
    found = {d.info.vendor for d in devices}
    if devices:
        here = node_for_ledger(ledger, node, config)
        for device in devices:
            device.name_node(here)
    seen = served(ledger).vendors
    if not found <= seen:
        seen = record_served(ledger, vendors=found).vendors
    expected = _expected(registry, vendors, seen)
    missing = {v: f"{expected[v]}, but {unusable[v]}" for v in sorted(expected) if v in unusable}
    return Found(_configured(devices, config), missing)


def discover(
    inventory: str | Path | Inventory | None = None,
    *,
    vendors: Iterable[str] | None = None,
    config: HamiConfig | Mapping[str, Any] | str | Path | None = None,
    ledger: Ledger | None = None,
    registry: VendorRegistry | None = None,
    node: str | None = None,
) -> list[Device]:
    """The devices of ``find_devices``; an expected vendor whose library cannot be loaded is logged as an
    error (``find_devices`` tells it to a caller, ``Found.require`` raises it).

    Discover every device of one node with the same ``ledger``: it is where their allocations meet, so two
    schedulers (threads, processes, hosts on a database ledger) never both take the last share.

    Args:
        inventory: an inventory file (or ``Inventory``) to run the simulated back end on; omitted: this
            node's hardware, through the vendor libraries.
        vendors: only these vendors (entry-point names); omitted: every installed one.
        config: a ``HamiConfig``, a mapping of its keys or a YAML path; its ``node-config`` filters and
            scales the devices.
        ledger: where allocations are kept: ``MemoryLedger()`` to embed or simulate, ``SqliteLedger(path)``
            (or ``open_ledger(url)``) on a node agent, so allocations survive a restart; omitted: a new
            in-memory ledger for these devices alone.
        registry: adapters already loaded (``load_vendors``); omitted: loaded here.
        node: this node's name (hardware only; see ``find_devices`` for the order it is looked up in).

    Returns:
        The devices, in each vendor's order (an inventory's order for the simulated back end).

    Raises:
        InvalidInventory: the inventory does not validate.
        InvalidConfig: the configuration does not validate.
        DeviceUnavailable: an inventory names a vendor whose plugin did not load.

    Example:
        ```python
        ledger = hd.MemoryLedger()
        devices = hd.discover("examples/cluster.yaml", ledger=ledger)
        handle = hd.allocate(devices, {"parts": [{"models": ["T4"], "memory_mib": 4096, "cores": 30}]})
        ```
    """
    found = find_devices(inventory, vendors=vendors, config=config, ledger=ledger, registry=registry, node=node)
    if found.missing:
        log.error("%s", missing_message(found.missing))
    return found.devices


def _expected(registry: VendorRegistry, named: Iterable[str] | None, seen: frozenset[str]) -> dict[str, str]:
    """Vendor -> why this node is expected to have it."""
    why: dict[str, str] = {v: "seen on this node before (the ledger recorded it)" for v in seen}
    for name, adapter in registry.adapters.items():
        variable = adapter.library_env
        if variable and os.environ.get(variable):
            why[name] = f"{variable} names its library {os.environ[variable]}"
    for name in named or ():
        why[name] = "named with --vendor"
    return why


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
