"""The adapter under test and the fresh test benches the checks run on.

A *target* is resolved once per session: the adapter (by entry-point name or
``module:Class``), and where its devices come from - an inventory, the
hardware back end, or a default simulated set.  Every check then gets its own
*bench*: a new in-memory ledger and freshly built devices, so checks never see
each other's allocations.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import os
import sys
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
from hami_devices.discovery import discover
from hami_devices.errors import HamiError, UnknownAllocation
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import Ledger, MemoryLedger
from hami_devices.models import DeviceHandle, DeviceInfo, PartitionProfile, ResourceRequest
from hami_devices.registry import VendorRegistry, load_vendors, safe_probe

INVENTORY_DIR = Path(__file__).resolve().parent / "inventories"
CONFIG_DIR = Path(__file__).resolve().parent / "configs"


class SuiteError(Exception):
    """The suite cannot run: unknown adapter, no devices, bad option.  Shown as a usage error."""


class NotApplicable(Exception):
    """Raised by a check that cannot apply to this adapter, with the reason for the report."""


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
        raise SuiteError(f"cannot import adapter class {spec!r}: {type(exc).__name__}: {exc}") from exc
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
            raise SuiteError(f"cannot instantiate {class_path}: {type(exc).__name__}: {exc}") from exc
    if not name:
        raise SuiteError("give --hami-adapter NAME or --hami-adapter-class MODULE:CLASS")
    registry = load_vendors([name], config)
    if name in registry.failures:
        raise SuiteError(f"vendor plugin {name!r} did not load: {registry.failures[name].error}")
    return registry.adapters[name], name


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


@dataclass
class Target:
    """The adapter under test and the recipe for its devices."""

    adapter: VendorAdapter
    plugin: str
    source: str
    profile: Profile
    factory: Callable[[Ledger], list[Device]]
    probe_detail: str = ""
    config_source: str = "defaults"

    @property
    def name(self) -> str:
        return self.adapter.name

    def bench(self) -> Bench:
        ledger = MemoryLedger()
        return Bench(self, ledger, list(self.factory(ledger)))

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


def _inventory_factory(adapter: VendorAdapter, data: Any, source: str) -> Callable[[Ledger], list[Device]]:
    registry = VendorRegistry(adapters={adapter.name: adapter})
    split = adapter.config.device_plugin.split_count
    inventory = parse_inventory(data, source=source, split_count_default=split)

    def build(ledger: Ledger) -> list[Device]:
        return discover(inventory, config=adapter.config, ledger=ledger, registry=registry)

    return build


def resolve_target(
    adapter: VendorAdapter, plugin: str, *, inventory: str | None = None, backend: str = "auto"
) -> Target:
    """Decide where the devices come from; raise SuiteError when there are none."""
    import yaml

    profile = adapter_profile(adapter)
    probe = safe_probe(adapter)
    detail = f"probe: {'available' if probe.available else 'unavailable'} ({probe.detail})"

    def target(source: str, factory: Callable[[Ledger], list[Device]]) -> Target:
        chosen = profile
        if chosen.workload is None:
            from hami_conformance.builtin import builtin_workload

            workload = builtin_workload(adapter, hardware=source == "hardware")
            if workload is not None:
                chosen = dataclasses.replace(profile, workload=workload)
        return Target(adapter, plugin, source, chosen, factory, detail)

    def from_file(path: str | Path, label: str) -> Target:
        try:
            data = yaml.safe_load(Path(path).read_text())
            return target(f"{label}:{path}", _inventory_factory(adapter, data, str(path)))
        except (OSError, yaml.YAMLError, HamiError) as exc:
            raise SuiteError(f"inventory {path}: {exc}") from exc

    if inventory:
        return from_file(inventory, "inventory")
    if backend in ("auto", "hardware") and probe.available:
        return target("hardware", adapter.discover)
    if backend == "hardware":
        raise SuiteError(f"{adapter.name}: hardware back end requested but {detail}")
    if profile.inventory is not None:
        return from_file(profile.inventory, "profile-inventory")
    shipped = INVENTORY_DIR / f"{adapter.name}.yaml"
    if shipped.is_file():
        return from_file(shipped, "default-inventory")
    if profile.devices is not None:
        return target("profile-devices", profile.devices)
    data = traits_inventory(adapter.name)
    if data is not None:
        return target("traits-catalog", _inventory_factory(adapter, data, f"<{adapter.name} traits catalog>"))
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
    info = device.info
    return list(info.partitions or device.adapter.partition_catalog(info.model))


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
