"""The adapter under test and the fresh test benches the checks run on.

A *target* is resolved once per session: the adapter (by entry-point name or
``module:Class``), and where its devices come from - an inventory, the
hardware back end, or a default simulated set.  Every check then gets its own
*bench*: a new in-memory ledger and freshly built devices, so checks never see
each other's allocations.  The restart checks build a bench on a durable
ledger and then a *restarted* target: a new adapter instance that finds its
devices again the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_conformance.profile import Profile
from hami_devices import traits as traits_catalog
from hami_devices.accounting import DeviceUsage, usage_of
from hami_devices.adapter import VendorAdapter
from hami_devices.allocation import allocate as core_allocate
from hami_devices.config import HamiConfig
from hami_devices.device import Device
from hami_devices.discovery import discover, load_inventory_for
from hami_devices.errors import HamiError, UnknownAllocation
from hami_devices.inventory import Inventory, parse_inventory
from hami_devices.ledger import Ledger, MemoryLedger
from hami_devices.models import DeviceHandle, DeviceInfo, PartitionProfile, ResourceRequest
from hami_devices.plugins import VENDOR_NAMESPACE
from hami_devices.registry import VendorRegistry, load_vendors, safe_probe

INVENTORY_DIR = Path(__file__).resolve().parent / "inventories"
CONFIG_DIR = Path(__file__).resolve().parent / "configs"


class SuiteError(Exception):
    """The suite cannot run: unknown adapter, no devices, bad option.  Shown as a usage error."""


class NotApplicable(Exception):
    """Raised by a check that cannot apply to this adapter, with the reason for the report.

    For a check of a capability the adapter declares, this is a failure: the claim cannot be proven."""


class ConfiguredOff(NotApplicable):
    """The operator's configuration switches the checked feature off (isolation-level): N/A even when declared."""


class CheckFailed(AssertionError):
    """A check found the adapter breaking its requirement."""


def expect(condition: object, message: str) -> None:
    """Fail the running check with ``message`` unless ``condition`` holds (not stripped by -O)."""
    if not condition:
        raise CheckFailed(message)


# -- loading the adapter -------------------------------------------------------


def _import_class(spec: str) -> type[Any]:
    """``package.module:Class`` or ``path/to/file.py:Class``."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise SuiteError(f"--hami-adapter-class expects MODULE:CLASS, got {spec!r}")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            mod_spec = importlib.util.spec_from_file_location(f"_hami_conformance_{path.stem}", path)
            if mod_spec is None or mod_spec.loader is None:
                raise SuiteError(f"cannot load {path}")
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[mod_spec.name] = module
            mod_spec.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())  # like ``python -m``: modules next to the caller import
            module = importlib.import_module(module_name)
        cls = getattr(module, attr)
    except SuiteError:
        raise
    except Exception as exc:
        raise SuiteError(f"cannot import adapter class {spec!r}: {type(exc).__name__}: {exc}\n{_trace()}") from exc
    if not isinstance(cls, type):
        raise SuiteError(f"{spec!r} is not a class")
    return cls


def load_adapter(name: str | None, class_path: str | None, config: HamiConfig) -> tuple[VendorAdapter, str]:
    """The adapter instance and how it was named (entry point name or class path)."""
    if class_path:
        cls = _import_class(class_path)
        if not issubclass(cls, VendorAdapter):
            raise SuiteError(f"{class_path!r} is not a hami_devices.VendorAdapter subclass")
        try:
            return cls(config), class_path
        except Exception as exc:
            raise SuiteError(f"cannot instantiate {class_path}: {type(exc).__name__}: {exc}\n{_trace()}") from exc
    if not name:
        raise SuiteError("give --hami-adapter NAME or --hami-adapter-class MODULE:CLASS")
    registry = load_vendors([name], config)
    if name in registry.failures:
        raise SuiteError(_load_failure(name, registry.failures[name].error))
    return registry.adapters[name], name


def _trace() -> str:
    return "".join(traceback.format_exc()).rstrip()


def _load_failure(name: str, error: str) -> str:
    """Why plugin ``name`` did not load, down to its root cause (a traceback, a misspelt name)."""
    from importlib.metadata import entry_points

    points = list(entry_points(group=VENDOR_NAMESPACE))
    found = [ep for ep in points if ep.name == name]
    if not found:
        near = sorted(ep.name for ep in points if ep.name.lower() == name.lower())
        if near:
            return (
                f"no vendor plugin named {name!r}, but {', '.join(repr(n) for n in near)} is registered: "
                f"entry-point names are case-sensitive (in {VENDOR_NAMESPACE})"
            )
        known = ", ".join(sorted(ep.name for ep in points)) or "none"
        return f"no vendor plugin named {name!r} in {VENDOR_NAMESPACE} (registered: {known})"
    point = found[0]
    try:
        plugin = point.load()
    except Exception:
        return f"vendor plugin {name!r} ({point.value}) failed to import:\n{_trace()}"
    try:
        plugin(None)
    except Exception:
        return f"vendor plugin {name!r} ({point.value}) failed to instantiate:\n{_trace()}"
    return f"vendor plugin {name!r} ({point.value}) did not load: {error}"


def adapter_profile(adapter: VendorAdapter) -> Profile:
    hook = getattr(adapter, "conformance_profile", None)
    if hook is None:
        return Profile()
    profile = hook()
    if not isinstance(profile, Profile):
        raise SuiteError(f"{type(adapter).__name__}.conformance_profile() must return hami_conformance.Profile")
    return profile


# -- where the devices come from ------------------------------------------------


def traits_inventory(vendor: str) -> dict[str, Any] | None:
    """An inventory built on the fly from the traits catalog: two models, a healthy set and a sick one."""
    models = traits_catalog.models(vendor)
    if not models:
        return None
    groups: list[dict[str, Any]] = [{"vendor": vendor, "model": models[0].model, "count": 3}]
    groups.append({"vendor": vendor, "model": models[-1].model, "count": 2, "unhealthy": [1]})
    return {"nodes": [{"name": "conformance-0", "devices": groups}]}


Recipe = Callable[[VendorAdapter], Callable[[Ledger], list[Device]]]
"""How one adapter instance finds its devices on a ledger; applied again to the instance a restart makes."""


@dataclass
class Target:
    """The adapter under test and the recipe for its devices."""

    adapter: VendorAdapter
    plugin: str
    source: str
    profile: Profile
    recipe: Recipe
    probe_detail: str = ""
    config_source: str = "defaults"

    @property
    def name(self) -> str:
        return self.adapter.name

    @property
    def factory(self) -> Callable[[Ledger], list[Device]]:
        return self.recipe(self.adapter)

    def bench(self, ledger: Ledger | None = None) -> Bench:
        ledger = ledger if ledger is not None else MemoryLedger()
        return Bench(self, ledger, list(self.factory(ledger)))

    def restarted(self) -> Target:
        """The same adapter class and configuration in a new instance, as after a restart of the
        managing process: nothing the old instance kept in memory survives."""
        try:
            fresh = type(self.adapter)(self.adapter.config)
        except Exception as exc:
            raise CheckFailed(f"a new {type(self.adapter).__name__} instance cannot be made: {exc}") from exc
        profile = adapter_profile(fresh)
        # the workload harness is the suite's (or the first instance's) choice, not new state
        profile = dataclasses.replace(profile, workload=self.profile.workload)
        return dataclasses.replace(self, adapter=fresh, profile=profile)

    def describe(self) -> dict[str, Any]:
        adapter = self.adapter
        return {
            "name": adapter.name,
            "plugin": self.plugin,
            "version": adapter.version,
            "class": f"{type(adapter).__module__}.{type(adapter).__qualname__}",
            "capabilities": sorted(str(c) for c in adapter.capabilities),
            "backend": self.source,
            "config": self.config_source,
            "probe": self.probe_detail,
        }


def vendor_case_problem(data: Any, vendor: str, source: str) -> str | None:
    """An inventory naming the vendor with other capitals: say so instead of "unknown model"."""
    nodes = data.get("nodes") if isinstance(data, dict) else None
    for n, node in enumerate(nodes if isinstance(nodes, list) else []):
        groups = node.get("devices") if isinstance(node, dict) else None
        for g, group in enumerate(groups if isinstance(groups, list) else []):
            named = group.get("vendor") if isinstance(group, dict) else None
            if isinstance(named, str) and named != vendor and named.lower() == vendor.lower():
                return (
                    f"inventory {source}: nodes.{n}.devices.{g}.vendor is {named!r} but the adapter's name is "
                    f"{vendor!r}: vendor names are case-sensitive"
                )
    return None


def _own_devices(inventory: Inventory, vendor: str) -> Inventory:
    """Only the adapter's own devices: a mixed inventory certifies one vendor at a time."""
    nodes = [n.model_copy(update={"devices": [d for d in n.devices if d.vendor == vendor]}) for n in inventory.nodes]
    kept = [n for n in nodes if n.devices]
    if not kept:
        present = sorted({d.vendor for n in inventory.nodes for d in n.devices})
        raise SuiteError(
            f"inventory {inventory.source}: no {vendor} devices (it has: {', '.join(present) or 'none'})"
        )
    return inventory.model_copy(update={"nodes": kept})


def _inventory_recipe(inventory: Inventory) -> Recipe:
    def recipe(adapter: VendorAdapter) -> Callable[[Ledger], list[Device]]:
        registry = VendorRegistry(adapters={adapter.name: adapter})

        def build(ledger: Ledger) -> list[Device]:
            return discover(inventory, config=adapter.config, ledger=ledger, registry=registry)

        return build

    return recipe


def load_target_inventory(adapter: VendorAdapter, source: str | Path | dict[str, Any]) -> Inventory:
    """An inventory file (or data) read the way ``discover``/``schedule`` read it: the adapter's
    own ``traits_for`` names its models, and the configured split count applies."""
    import yaml

    registry = VendorRegistry(adapters={adapter.name: adapter})
    where = str(source) if not isinstance(source, dict) else f"<{adapter.name} traits catalog>"
    try:
        data = source if isinstance(source, dict) else yaml.safe_load(Path(source).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SuiteError(f"inventory {where}: {exc}") from exc
    problem = vendor_case_problem(data, adapter.name, where)
    if problem:
        raise SuiteError(problem)
    try:
        if isinstance(source, dict):
            inventory = parse_inventory(
                data,
                source=where,
                split_count_default=adapter.config.device_plugin.split_count,
                traits_for=lambda vendor, model: adapter.traits_for(model) if vendor == adapter.name else None,
            )
        else:
            inventory = load_inventory_for(source, registry, adapter.config)
    except HamiError as exc:
        raise SuiteError(f"inventory {where}: {exc}") from exc
    return _own_devices(inventory, adapter.name)


def _profile_devices(adapter: VendorAdapter) -> Callable[[Ledger], list[Device]]:
    devices = adapter_profile(adapter).devices
    if devices is None:
        raise SuiteError(f"{type(adapter).__name__}.conformance_profile() no longer gives devices")
    return devices


def resolve_target(
    adapter: VendorAdapter, plugin: str, *, inventory: str | None = None, backend: str = "auto"
) -> Target:
    """Decide where the devices come from; raise SuiteError when there are none."""
    profile = adapter_profile(adapter)
    probe = safe_probe(adapter)
    detail = f"probe: {'available' if probe.available else 'unavailable'} ({probe.detail})"

    def target(source: str, recipe: Recipe) -> Target:
        from hami_conformance.builtin import builtin_partition_reader, builtin_workload, fake_hardware

        hardware = source == "hardware"
        chosen = profile
        if not hardware and recipe is not _profile_devices:
            # devices built from an inventory exist in no vendor library: its reader is not asked about
            # them, nor its fault injector
            chosen = dataclasses.replace(chosen, hardware_partitions=None, faults=None, facts=None)
        if chosen.workload is None:
            workload = builtin_workload(adapter, hardware=hardware, fake=fake_hardware(adapter, probe))
            if workload is not None:
                chosen = dataclasses.replace(chosen, workload=workload)
        if hardware and fake_hardware(adapter, probe):
            # the fake library's own files: facts the adapter's objects cannot bend, and its fault hook
            from hami_conformance.fake_faults import fake_library_faults
            from hami_conformance.fixture_facts import fixture_facts
            from hami_conformance.state_partitions import state_partition_reader

            if chosen.facts is None:
                chosen = dataclasses.replace(chosen, facts=fixture_facts(adapter))
            if chosen.faults is None:
                chosen = dataclasses.replace(chosen, faults=fake_library_faults(adapter))
            if chosen.hardware_partitions is None:
                chosen = dataclasses.replace(chosen, hardware_partitions=state_partition_reader(adapter, probe.library))
        if chosen.hardware_partitions is None and hardware:
            reader = builtin_partition_reader(adapter, probe.library)
            if reader is not None:
                chosen = dataclasses.replace(chosen, hardware_partitions=reader)
        return Target(adapter, plugin, source, chosen, recipe, detail)

    def from_file(path: str | Path, label: str) -> Target:
        return target(f"{label}:{path}", _inventory_recipe(load_target_inventory(adapter, path)))

    if inventory:
        return from_file(inventory, "inventory")
    if backend in ("auto", "hardware") and probe.available:
        return target("hardware", lambda a: a.discover)
    if backend == "hardware":
        raise SuiteError(f"{adapter.name}: hardware back end requested but {detail}")
    if profile.inventory is not None:
        return from_file(profile.inventory, "profile-inventory")
    shipped = INVENTORY_DIR / f"{adapter.name}.yaml"
    if shipped.is_file():
        return from_file(shipped, "default-inventory")
    if profile.devices is not None:
        return target("profile-devices", _profile_devices)
    data = traits_inventory(adapter.name)
    if data is not None:
        return target("traits-catalog", _inventory_recipe(load_target_inventory(adapter, data)))
    raise SuiteError(
        f"no devices to certify {adapter.name} on: {detail}; give --hami-inventory FILE, or let the adapter's "
        "conformance_profile() provide an inventory or simulated devices"
    )


# -- capacity and requests ----------------------------------------------------------


@dataclass(frozen=True)
class Capacity:
    memory_mib: int
    cores: int
    split_count: int


def memory_factor(config: HamiConfig) -> float:
    """The share of a device's memory that may be granted (overcommit x scaling x fraction)."""
    from hami_devices import accounting

    return accounting.memory_factor(config)


def capacity(device: Device) -> Capacity:
    config = device.adapter.config
    return Capacity(
        memory_mib=int(device.info.memory_mib * memory_factor(config)),
        cores=int(100 * config.device_plugin.core_scaling),
        split_count=device.info.split_count,
    )


def share(
    memory_mib: int | None = None, cores: int = 0, *, count: int = 1, uuids: Sequence[str] = (), **part: Any
) -> ResourceRequest:
    """A one-part request."""
    fields: dict[str, Any] = {"count": count, "cores": cores, **part}
    if memory_mib is not None:
        fields["memory_mib"] = memory_mib
    if uuids:
        fields["uuids"] = list(uuids)
    return ResourceRequest(name="conformance", parts=[fields])


def profiles_of(device: Device) -> list[PartitionProfile]:
    """The partition catalog as discovery reported it in the device's DeviceInfo: what a scheduler
    sees.  (The adapter's partition_catalog() is its own helper, not a fact about the device.)"""
    return list(device.info.partitions)


# -- the bench -----------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceState:
    """Everything an allocation may change on one device, for before/after comparisons."""

    usage: DeviceUsage
    allocated_memory_mib: int
    allocated_cores: int
    sharers: int
    allocation_ids: tuple[str, ...]
    memory_used_mib: object

    def differences(self, other: DeviceState) -> list[str]:
        out = []
        for name in self.__dataclass_fields__:
            if getattr(self, name) != getattr(other, name):
                out.append(f"{name}: {getattr(self, name)!r} -> {getattr(other, name)!r}")
        return out


@dataclass
class Bench:
    """A fresh ledger and the adapter's devices on it."""

    target: Target
    ledger: Ledger
    devices: list[Device]
    notes: list[str] = field(default_factory=list)

    @property
    def adapter(self) -> VendorAdapter:
        return self.target.adapter

    def healthy(self) -> list[Device]:
        return [d for d in self.devices if d.info.healthy]

    def by_uuid(self, uuid: str) -> Device:
        for device in self.devices:
            if device.uuid == uuid:
                return device
        raise KeyError(uuid)

    def device(self) -> Device:
        """The device single-device checks run on: the healthy one with the most memory."""
        healthy = self.healthy()
        expect(healthy, f"{self.adapter.name}: no healthy device to run on ({len(self.devices)} discovered)")
        return max(healthy, key=lambda d: (d.info.memory_mib, -d.info.index))

    def same_node_group(self, minimum: int) -> list[Device]:
        """The largest set of healthy devices on one node; fails the check when it is too small."""
        nodes: dict[str, list[Device]] = {}
        for device in self.healthy():
            nodes.setdefault(device.info.node, []).append(device)
        group = max(nodes.values(), key=len, default=[])
        expect(
            len(group) >= minimum,
            f"this check needs {minimum} healthy devices on one node, the back end has {len(group)} "
            "(run on an inventory with more: --hami-inventory)",
        )
        return group

    # -- operations through the adapter's own Device objects ----------------------
    def allocate_on(self, device: Device, request: ResourceRequest | Mapping[str, Any]) -> DeviceHandle:
        return device.allocate(request)

    def allocate_many(self, devices: Sequence[Device], request: ResourceRequest) -> DeviceHandle:
        return core_allocate(list(devices), request)

    def release(self, handle: DeviceHandle | str) -> None:
        handle_id = handle if isinstance(handle, str) else handle.id
        owner = self.devices[0]
        if not isinstance(handle, str):
            for device in self.devices:
                if device.uuid in handle.uuids:
                    owner = device
                    break
        owner.release(handle_id if isinstance(handle, str) else handle)

    def recorded(self, handle: DeviceHandle) -> DeviceHandle:
        """The ledger's copy of an allocation (the fact checks compare with); it must be what
        allocate returned."""
        try:
            stored = self.ledger.get(handle.id)
        except UnknownAllocation:
            raise CheckFailed(f"allocate returned handle {handle.id}, which the ledger does not hold") from None
        expect(
            (stored.grants, stored.env, stored.regions) == (handle.grants, handle.env, handle.regions),
            f"allocate returned handle {handle.id} with other grants, environment or regions than the ledger records",
        )
        return stored

    def state(self, device: Device) -> DeviceState:
        metrics = device.monitor()
        return DeviceState(
            usage=usage_of(self.ledger.grants_on(device.uuid)),
            allocated_memory_mib=metrics.allocated_memory_mib,
            allocated_cores=metrics.allocated_cores,
            sharers=metrics.sharers,
            allocation_ids=tuple(sorted(a.handle_id for a in metrics.allocations)),
            memory_used_mib=metrics.memory_used_mib,
        )

    def states(self) -> dict[str, DeviceState]:
        return {d.uuid: self.state(d) for d in self.devices}

    def live_ids(self) -> set[str]:
        return {h.id for h in self.ledger.handles()}

    def cleanup(self) -> None:
        """Release whatever a check left behind (hardware back ends must not keep partitions)."""
        for handle in self.ledger.handles():
            with contextlib.suppress(UnknownAllocation, HamiError):
                self.release(handle)
        self.ledger.close()


def device_info_errors(info: DeviceInfo) -> list[str]:
    """Problems re-validating a DeviceInfo (an adapter may have built it with model_construct)."""
    try:
        DeviceInfo.model_validate_json(info.model_dump_json())
    except HamiError as exc:
        return [str(exc)]
    return []
