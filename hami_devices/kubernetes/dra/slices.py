"""ResourceSlices: one shareable device per physical accelerator, partitions as counter-consuming devices.

Each physical accelerator is one device with ``allowMultipleAllocations`` and the
consumable capacities ``memory`` and ``cores`` (``capacity.py``).  The partitions its
rule can make on an empty card (MIG profiles at each valid placement, vNPU templates,
sMLU profiles: one device per instance it may hold) are published as devices of their
own that consume a per-card counter set (KEP-4815): ``memory`` and ``cores`` and, where
the vendor places instances on slices (MIG), one counter per memory slice, so two
overlapping placements can never both be allocated; a profile with fewer instances than
placements (MIG's ``+me``, one per GPU) also consumes a counter of its own holding that number.

A pool is one node's devices.  How they are cut into slices follows the rules of the
Kubernetes release served (``packing``): under 1.34 a card, its counter set and its
partitions share a slice; from 1.35 on a slice holds devices or counter sets, never both.
Every device is checked against the 32 attributes-plus-capacities limit.
``PoolPublisher`` bumps the pool generation whenever what it publishes changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes.dra import names, packing
from hami_devices.kubernetes.dra.attributes import Attributes, device_attributes, to_api
from hami_devices.kubernetes.dra.capacity import Capacity, cores_capacity, memory_capacity
from hami_devices.models import DeviceInfo, Grant, PartitionProfile, RequestPart
from hami_devices.rounding import DefaultRule, GrantRule

API_VERSION = "resource.k8s.io/v1"
MAX_ATTRIBUTES_AND_CAPACITIES = 32


@dataclass
class PublishedDevice:
    """One device of a pool, as the driver publishes it."""

    name: str
    node: str
    uuid: str  # the physical accelerator's uuid (a partition's parent)
    vendor: str
    attributes: Attributes
    capacity: dict[str, Capacity]
    shareable: bool
    partition: str | None = None
    counter_set: str | None = None  # the set this (partition) device consumes from
    consumes: dict[str, int] = field(default_factory=dict)

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "attributes": to_api(self.attributes)}
        out["capacity"] = {k: c.to_api(consumable=self.shareable) for k, c in self.capacity.items()}
        if self.shareable:
            out["allowMultipleAllocations"] = True
        if self.counter_set is not None:
            out["consumesCounters"] = [
                {"counterSet": self.counter_set, "counters": {k: {"value": _counter_quantity(k, v)}
                                                              for k, v in self.consumes.items()}}
            ]
        return out


@dataclass
class CardUnit:
    """A physical card with its partitions and counter set: never split across slices."""

    devices: list[PublishedDevice]
    counter_set: str | None = None
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def consumptions(self) -> int:
        return sum(len(d.consumes) for d in self.devices)

    def counter_set_api(self) -> dict[str, Any]:
        assert self.counter_set is not None
        return {"name": self.counter_set,
                "counters": {k: {"value": _counter_quantity(k, v)} for k, v in self.counters.items()}}


def _counter_quantity(name: str, value: int) -> str:
    return f"{value}Mi" if name == "memory" else str(value)


def card_unit(info: DeviceInfo, rule: GrantRule) -> CardUnit:
    """The devices and counters one healthy accelerator publishes."""
    parent = names.device_name(info.vendor, info.index)
    memory = memory_capacity(rule, info)
    cores = cores_capacity(rule, info)
    physical = PublishedDevice(
        name=parent,
        node=info.node,
        uuid=info.uuid,
        vendor=info.vendor,
        attributes=device_attributes(info),
        capacity={"memory": memory, "cores": cores},
        shareable=True,
    )
    unit = CardUnit([physical])
    profiles = [p for p in info.partitions if _grantable(rule, info, p)]
    if not profiles:
        _check_limits(physical)
        return unit
    unit.counter_set = names.label(f"{parent}-counters")
    unit.counters = {"memory": info.memory_mib, "cores": 100}
    slices = _memory_slices(profiles)
    unit.counters.update({f"memory-slice-{k}": 1 for k in range(slices)})
    for profile in profiles:
        slots = _slots(profile, slices)
        limit = _instance_counter(profile, slots)
        if limit is not None:
            unit.counters[limit] = profile.max_instances
        for slot in slots:
            attrs = device_attributes(info, kind=names.KIND_PARTITION)
            attrs[names.DOMAIN]["partition"] = profile.name
            attrs[names.DOMAIN]["parentDevice"] = parent
            consumes = {"memory": profile.memory_mib, "cores": profile.cores}
            if slices:
                width = profile.native.get("memory_slices", 1)
                consumes.update({f"memory-slice-{k}": 1 for k in range(slot, slot + width)})
            if limit is not None:
                consumes[limit] = 1
            unit.devices.append(
                PublishedDevice(
                    name=names.partition_name(parent, profile.name, slot),
                    node=info.node,
                    uuid=info.uuid,
                    vendor=info.vendor,
                    attributes=attrs,
                    capacity={
                        "memory": Capacity(profile.memory_mib, "Mi", profile.memory_mib),
                        "cores": Capacity(profile.cores, "", profile.cores),
                    },
                    shareable=False,
                    partition=profile.name,
                    counter_set=unit.counter_set,
                    consumes=consumes,
                )
            )
    for device in unit.devices:
        _check_limits(device)
    return unit


def _grantable(rule: GrantRule, info: DeviceInfo, profile: PartitionProfile) -> bool:
    """Whether the device's rule hands out this profile at all (MIG off: no partitions are published)."""
    planned = rule.plan_grant(info, RequestPart(partition=profile.name), 0, DeviceUsage())
    return isinstance(planned, Grant) and planned.partition == profile.name


def _memory_slices(profiles: Sequence[PartitionProfile]) -> int:
    """Memory slices of a card whose profiles are placed on slices (MIG); 0 for the others."""
    ends = [start + p.native.get("memory_slices", 1) for p in profiles if p.placements for start in p.placements]
    return max(ends, default=0)


def _slots(profile: PartitionProfile, slices: int) -> list[int]:
    return list(profile.placements) if slices and profile.placements else list(range(profile.max_instances))


def _instance_counter(profile: PartitionProfile, slots: Sequence[int]) -> str | None:
    """The counter that caps a profile published at more places than it may have instances (MIG's ``+me``
    profiles: one per GPU, for the media engines they take, at any of 7 placements); None for the others."""
    if profile.max_instances >= len(slots):
        return None
    return names.label(f"{profile.name}-instances")


def _check_limits(device: PublishedDevice) -> None:
    entries = sum(len(v) for v in device.attributes.values()) + len(device.capacity)
    if entries > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise InvalidRequest(
            f"devices.{device.name}.attributes",
            f"{entries} attributes and capacities; a device holds at most {MAX_ATTRIBUTES_AND_CAPACITIES}",
        )
    if len(device.consumes) > packing.MAX_COUNTERS_PER_SET:
        raise InvalidRequest(
            f"devices.{device.name}.consumesCounters", f"more than {packing.MAX_COUNTERS_PER_SET} counters"
        )


def node_units(infos: Sequence[DeviceInfo], rules: Mapping[str, GrantRule]) -> list[CardUnit]:
    """Every healthy device of one node (an unhealthy one leaves the pool until it recovers)."""
    default = DefaultRule()
    ordered = sorted((i for i in infos if i.healthy), key=lambda i: (i.vendor, i.index, i.uuid))
    return [card_unit(info, rules.get(info.vendor, default)) for info in ordered]


def slice_objects(
    node: str,
    units: Sequence[CardUnit],
    generation: int,
    *,
    driver: str = names.DRIVER,
    kubernetes: str = packing.DEFAULT_RELEASE,
) -> list[dict[str, Any]]:
    """The pool's ResourceSlices as API JSON under the rules of release ``kubernetes``, built and serialised
    through the client's models."""
    from kubernetes.client import ApiClient, V1ResourceSlice

    contents = packing.pack(units, kubernetes)
    out = []
    for i, content in enumerate(contents):
        spec: dict[str, Any] = {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": len(contents)},
        }
        if content.counter_sets:
            spec["sharedCounters"] = content.counter_sets
        if content.devices or not content.counter_sets:
            spec["devices"] = content.devices
        body = {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": names.label(f"{node}-{driver}-{i}"), "labels": {"app.kubernetes.io/name": driver}},
            "spec": spec,
        }
        model = V1ResourceSlice.model_validate(body)
        out.append(ApiClient().sanitize_for_serialization(model))  # type: ignore[no-untyped-call]
    return out


class PoolPublisher:
    """One node's pool over time: the same devices republish the same generation, any change bumps it."""

    def __init__(
        self, node: str, *, driver: str = names.DRIVER, generation: int = 0, kubernetes: str | None = None
    ) -> None:
        self.node = node
        self.driver = driver
        self.generation = generation
        self.kubernetes = packing.release(kubernetes)
        self._digest: str | None = None

    def publish(self, infos: Sequence[DeviceInfo], rules: Mapping[str, GrantRule]) -> list[dict[str, Any]]:
        units = node_units(infos, rules)
        content = json.dumps([[d.to_api() for d in u.devices] for u in units], sort_keys=True)
        digest = hashlib.sha256(content.encode()).hexdigest()
        if digest != self._digest:
            self.generation += 1
            self._digest = digest
        return slice_objects(self.node, units, self.generation, driver=self.driver, kubernetes=self.kubernetes)
