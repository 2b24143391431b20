"""All-or-nothing allocation and exact release over a set of devices.

The whole request is planned and recorded inside one ledger transaction, so
either every part gets its devices or nothing is written.  Hardware side
effects (partitions, limiter regions) happen inside that transaction too and
are undone if anything after them fails.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hami_devices.accounting import DeviceUsage, rejection_reasons, usage_of
from hami_devices.config import HamiConfig
from hami_devices.errors import InsufficientResources, InvalidRequest, ReasonCode
from hami_devices.isolation import create_region, limits_enforced, merge_environments, remove_regions
from hami_devices.ledger import Ledger, LedgerView
from hami_devices.matching import static_reasons
from hami_devices.models import DeviceHandle, Grant, RequestPart, ResourceRequest

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter
    from hami_devices.device import Device

TOPOLOGY_REQUIRED_MIN_SCORE = 50
"""Pair score every two devices of a part must reach when a request requires topology.

Fabric links (NVLink, HCCS, MLU-Link) score above it and PCIe paths below, so
``topology: required`` means "linked by the device fabric"."""


def memory_factor(config: HamiConfig) -> float:
    """How much of a device's memory may be granted: overcommit x scaling x the scheduler's fraction."""
    plugin = config.device_plugin
    fraction = config.scheduler.resource_allocation.gpu_memory_fraction
    return plugin.memory_overcommit * plugin.memory_scaling * fraction


def coerce_request(request: ResourceRequest | Mapping[str, Any]) -> ResourceRequest:
    if isinstance(request, ResourceRequest):
        return request
    if isinstance(request, Mapping):
        return ResourceRequest.model_validate(dict(request))
    raise InvalidRequest("<request>", f"expected a ResourceRequest or a mapping, got {type(request).__name__}")


class _Planner:
    """First-fit planning of one request on one group of devices, inside a transaction."""

    def __init__(self, view: LedgerView, reasons: dict[str, list[ReasonCode]]) -> None:
        self.view = view
        self.reasons = reasons
        self.usage: dict[str, DeviceUsage] = {}

    def usage_of(self, device: Device) -> DeviceUsage:
        if device.uuid not in self.usage:
            self.usage[device.uuid] = usage_of(self.view.grants_on(device.uuid))
        return self.usage[device.uuid]

    def grant_for(self, device: Device, part: RequestPart, index: int) -> Grant | None:
        info = device.info
        problems = static_reasons(info, part)
        if problems:
            self.reasons[info.uuid] = problems
            return None
        usage = self.usage_of(device)
        planned = device.adapter.plan_grant(info, part, index, usage)
        if isinstance(planned, ReasonCode):
            self.reasons[info.uuid] = [planned]
            return None
        config = device.adapter.config
        problems = rejection_reasons(
            info,
            usage,
            planned,
            memory_overcommit=memory_factor(config),
            core_capacity=int(100 * config.device_plugin.core_scaling),
        )
        if problems:
            self.reasons[info.uuid] = problems
            return None
        return planned

    def plan(self, devices: Sequence[Device], request: ResourceRequest) -> list[Grant] | None:
        taken: set[str] = set()
        grants: list[Grant] = []
        node = devices[0].info.node if devices else "<none>"
        for index, part in enumerate(request.parts):
            feasible: list[tuple[Device, Grant]] = []
            for device in devices:
                if device.uuid in taken:
                    continue
                grant = self.grant_for(device, part, index)
                if grant is not None:
                    feasible.append((device, grant))
            if len(feasible) < part.count:
                self.reasons.setdefault(node, []).append(ReasonCode.NODE_INSUFFICIENT_DEVICES)
                return None
            chosen = _best_linked(feasible, part.count, request.topology)
            if chosen is None:
                self.reasons.setdefault(node, []).append(ReasonCode.NODE_TOPOLOGY_UNSATISFIED)
                return None
            for device, grant in chosen:
                taken.add(device.uuid)
                grants.append(grant)
                self.usage[device.uuid] = self.usage_of(device).plus(grant)
        return grants


def _pair(a: Device, b: Device) -> int:
    return a.adapter.pair_score(a.info, b.info)


def _best_linked(
    feasible: list[tuple[Device, Grant]], count: int, topology: str
) -> list[tuple[Device, Grant]] | None:
    """``count`` of the feasible devices: first fit, or the best-linked set when topology matters.

    Greedy growth from every seed (a node has at most a few dozen devices, so this
    is cheap and avoids enumerating combinations); ``required`` also demands that
    every pair reaches ``TOPOLOGY_REQUIRED_MIN_SCORE``.  Ties keep device order.
    """
    if count == 1 or topology == "none":
        return feasible[:count]
    best: list[tuple[Device, Grant]] | None = None
    best_score = -1
    for seed in range(len(feasible)):
        members = [feasible[seed]]
        rest = [f for i, f in enumerate(feasible) if i != seed]
        while len(members) < count:
            candidates = [
                (sum(_pair(c[0], m[0]) for m in members), -n, c)
                for n, c in enumerate(rest)
                if topology != "required" or all(_pair(c[0], m[0]) >= TOPOLOGY_REQUIRED_MIN_SCORE for m in members)
            ]
            if not candidates:
                break
            _, _, pick = max(candidates, key=lambda t: (t[0], t[1]))
            members.append(pick)
            rest.remove(pick)
        if len(members) < count:
            continue
        score = sum(_pair(a[0], b[0]) for i, a in enumerate(members) for b in members[i + 1 :])
        if score > best_score:
            best, best_score = members, score
    return best


def _groups(devices: Sequence[Device], same_node: bool) -> list[list[Device]]:
    if not same_node:
        return [list(devices)]
    groups: dict[str, list[Device]] = defaultdict(list)
    for device in devices:
        groups[device.info.node].append(device)
    return list(groups.values())


def _realise(handle: DeviceHandle, adapters: Mapping[str, VendorAdapter]) -> DeviceHandle:
    """Create partitions and limiter regions, and build the environment; undo on failure."""
    by_vendor: dict[str, list[Grant]] = defaultdict(list)
    for grant in handle.grants:
        by_vendor[grant.vendor].append(grant)
    prepared: dict[str, list[Grant]] = {}
    regions: dict[str, str] = {}
    try:
        for vendor, grants in by_vendor.items():
            prepared[vendor] = adapters[vendor].prepare(grants)
        for vendor, grants in prepared.items():
            if limits_enforced(adapters[vendor]):
                regions[vendor] = str(create_region(adapters[vendor], handle.id, grants))
        env = merge_environments(
            [adapters[v].environment(grants, regions.get(v)) for v, grants in prepared.items()]
        )
    except BaseException:
        for vendor, grants in prepared.items():
            adapters[vendor].teardown(grants)
        remove_regions(handle.model_copy(update={"regions": regions}))
        raise
    final_grants = [g for grants in prepared.values() for g in grants]
    final_grants.sort(key=lambda g: (g.part, handle.uuids.index(g.uuid)))
    return handle.model_copy(update={"grants": final_grants, "env": env, "regions": regions})


def allocate(devices: Sequence[Device], request: ResourceRequest | Mapping[str, Any]) -> DeviceHandle:
    """Grant ``request`` on ``devices`` (first fit), all parts or none."""
    req = coerce_request(request)
    if not devices:
        raise InsufficientResources("no devices to allocate from")
    ledger = devices[0].ledger
    if any(d.ledger is not ledger for d in devices):
        raise InvalidRequest("devices", "devices must share one ledger to be allocated together")
    adapters = {d.info.vendor: d.adapter for d in devices}
    reasons: dict[str, list[ReasonCode]] = {}
    with ledger.transaction() as view:
        grants: list[Grant] | None = None
        for group in _groups(devices, req.same_node):
            planner = _Planner(view, reasons)
            grants = planner.plan(group, req)
            if grants is not None:
                break
        if grants is None:
            label = req.name or "request"
            raise InsufficientResources(f"{label} does not fit on the given devices", reasons)
        handle = _realise(DeviceHandle(request=req, grants=grants), adapters)
        try:
            view.add(handle)
        except BaseException:
            _undo(handle, adapters)
            raise
    return handle


def _undo(handle: DeviceHandle, adapters: Mapping[str, VendorAdapter]) -> None:
    by_vendor: dict[str, list[Grant]] = defaultdict(list)
    for grant in handle.grants:
        by_vendor[grant.vendor].append(grant)
    for vendor, grants in by_vendor.items():
        if vendor in adapters:
            adapters[vendor].teardown(grants)
    remove_regions(handle)


def release(ledger: Ledger, handle: DeviceHandle | str, adapters: Mapping[str, VendorAdapter]) -> DeviceHandle:
    """Remove exactly this allocation; ``UnknownAllocation`` if it is not live."""
    handle_id = handle if isinstance(handle, str) else handle.id
    with ledger.transaction() as view:
        removed = view.remove(handle_id)
        missing = {g.vendor for g in removed.grants} - set(adapters)
        resolved = dict(adapters)
        if missing:
            from hami_devices.registry import adapter_for

            resolved.update({vendor: adapter_for(vendor) for vendor in missing})
        _undo(removed, resolved)
    return removed
