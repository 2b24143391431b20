"""The placement rules as the specification writes them, for a brute-force reference placer.

Nothing here imports the product's rule code: every rule is written out from
``/work/shared/DESIGN.md`` ("Core concepts", "The scoring engine", "One
placement path") and the README ("One placement path"):

* static matching: a part's vendor, model (by name or alias; "case, spaces,
  dashes and vendor prefixes do not distinguish models") and uuid include and
  exclude lists, the precision it asks for (refused where the device's traits
  say the precision is absent; a device without traits is not judged), its
  NUMA node, and the device's health (and its node being schedulable);
* the grant: memory as MiB, as a percent of the device, or (omitted) the whole
  device; the part's cores, exclusive at 100; a part naming a partition gets
  the named profile, or for ``auto`` the smallest (memory, then cores) profile
  covering what it asks with an instance left, and that profile's memory and
  cores;
* capacity: memory <= total x overcommit x scaling x gpu-memory-fraction,
  cores <= 100 x core scaling, sharers <= split count, an exclusive holder is
  alone.

Amounts are exact (``Fraction``), so a boundary is a boundary.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations, product
from typing import Any

# The documented order of device reasons (README, "One rule table"; each device gets the first it fails): the
# device's facts against the part, then its state, then the vendor's rounding, then what the part needs.
VENDOR = "CardVendorMismatch"
MODEL = "CardTypeMismatch"
UUID = "CardUuidMismatch"
UNHEALTHY = "CardUnhealthy"
PRECISION = "CardPrecisionUnsupported"
NUMA = "CardNumaMismatch"
PARTITION = "CardPartitionUnavailable"
HELD = "CardExclusivelyHeld"
NOT_EMPTY = "CardNotEmptyForExclusive"
SPLIT = "CardSplitCountExhausted"
MEMORY = "CardInsufficientMemory"
CORES = "CardInsufficientCore"
DEVICE_ORDER = (VENDOR, MODEL, UUID, PRECISION, NUMA, UNHEALTHY, HELD, SPLIT, PARTITION, NOT_EMPTY, MEMORY, CORES)
STATIC = frozenset({VENDOR, MODEL, UUID, UNHEALTHY, PRECISION, NUMA})

NODE_CPU = "NodeInsufficientCpu"
NODE_MEMORY = "NodeInsufficientMemory"
NODE_DEVICES = "NodeInsufficientDevices"
NODE_UNSCHEDULABLE = "NodeUnschedulable"
UNKNOWN_MODEL = "UnknownModel"
UNKNOWN_VENDOR = "UnknownVendor"

_PREFIXES = ("nvidia", "tesla", "huawei", "ascend", "cambricon")


def model_key(name: str) -> str:
    """A model name with case, spaces, dashes, underscores and a leading vendor prefix taken away."""
    text = name.lower()
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :].lstrip()
            break
    return re.sub(r"[\s_-]", "", text)


@dataclass(frozen=True)
class Profile:
    name: str
    memory_mib: int
    cores: int
    max_instances: int


@dataclass(frozen=True)
class Dev:
    """One device's static facts."""

    uuid: str
    node: str
    index: int
    vendor: str
    model: str
    memory_mib: int
    split: int
    aliases: tuple[str, ...] = ()
    numa: int | None = None
    healthy: bool = True
    precisions: frozenset[str] | None = None  # None: the device has no traits
    profiles: tuple[Profile, ...] = ()

    def names(self) -> set[str]:
        return {model_key(self.model), *(model_key(a) for a in self.aliases)}


@dataclass(frozen=True)
class Held:
    """What the live grants on one device hold."""

    memory_mib: int = 0
    cores: int = 0
    sharers: int = 0
    exclusive: bool = False
    partitions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Share:
    """What one part would be granted on one device."""

    memory_mib: int
    cores: int
    exclusive: bool
    partition: str | None = None


@dataclass
class Host:
    name: str
    cpu_total: int
    mem_total: int
    cpu_used: int = 0
    mem_used: int = 0
    schedulable: bool = True

    @property
    def cpu_free(self) -> int:
        return self.cpu_total - self.cpu_used

    @property
    def mem_free(self) -> int:
        return self.mem_total - self.mem_used


@dataclass
class World:
    """A cluster as the specification sees it: hosts, devices, what is held, and the capacity factors."""

    hosts: list[Host]
    devices: list[Dev]
    held: dict[str, Held] = field(default_factory=dict)
    memory_factor: Fraction = Fraction(1)
    core_capacity: int = 100

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def device(self, uuid: str) -> Dev:
        return next(d for d in self.devices if d.uuid == uuid)

    def usage(self, uuid: str) -> Held:
        return self.held.get(uuid, Held())

    def memory_capacity(self, dev: Dev) -> int:
        return math.floor(dev.memory_mib * self.memory_factor)

    def on(self, node: str) -> list[Dev]:
        return [d for d in self.devices if d.node == node]


def asked_memory(part: Any, dev: Dev) -> int:
    """MiB the part asks of ``dev``: its MiB, its percent of the device, or (omitted) the whole device."""
    if part.memory_mib is not None:
        return int(part.memory_mib)
    if part.memory_percent is not None:
        return max(1, math.floor(dev.memory_mib * Fraction(part.memory_percent) / 100))
    return dev.memory_mib


def static_failures(part: Any, dev: Dev, host: Host) -> list[str]:
    out = []
    vendor = dev.vendor.lower()
    if (part.vendors and vendor not in {v.lower() for v in part.vendors}) or vendor in {
        v.lower() for v in part.exclude_vendors
    }:
        out.append(VENDOR)
    names = dev.names()
    if (part.models and not names & {model_key(m) for m in part.models}) or names & {
        model_key(m) for m in part.exclude_models
    }:
        out.append(MODEL)
    if (part.uuids and dev.uuid not in part.uuids) or dev.uuid in part.exclude_uuids:
        out.append(UUID)
    if not dev.healthy:
        out.append(UNHEALTHY)
    if part.precision is not None and dev.precisions is not None and part.precision not in dev.precisions:
        out.append(PRECISION)
    if part.numa_node is not None and dev.numa != part.numa_node:
        out.append(NUMA)
    return out


def share_for(part: Any, dev: Dev, held: Held) -> Share | None:
    """The grant before the capacity rules: a plain share, or a profile (None: no profile covers the part)."""
    if part.partition is None:
        return Share(asked_memory(part, dev), int(part.cores), exclusive=part.cores >= 100)
    given = part.memory_mib is not None or part.memory_percent is not None
    want = asked_memory(part, dev) if given else 0
    fitting = [
        p
        for p in dev.profiles
        if (part.partition == "auto" or p.name == part.partition)
        and p.memory_mib >= want
        and p.cores >= part.cores
        and held.partitions.count(p.name) < p.max_instances
    ]
    if not fitting:
        return None
    best = min(fitting, key=lambda p: (p.memory_mib, p.cores))
    return Share(best.memory_mib, best.cores, exclusive=False, partition=best.name)


def capacity_failures(world: World, dev: Dev, held: Held, share: Share | None) -> list[str]:
    out = []
    if held.exclusive:
        out.append(HELD)
    if share is not None and share.exclusive and held.sharers > 0:
        out.append(NOT_EMPTY)
    if held.sharers + 1 > dev.split:
        out.append(SPLIT)
    if share is not None:
        if held.memory_mib + share.memory_mib > world.memory_capacity(dev):
            out.append(MEMORY)
        if held.cores + share.cores > world.core_capacity:
            out.append(CORES)
    return out


@dataclass(frozen=True)
class Verdict:
    """One part on one device: the share it would get, or every rule it breaks (in the documented order)."""

    share: Share | None
    failures: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def first(self) -> str | None:
        return self.failures[0] if self.failures else None


def judge(world: World, part: Any, dev: Dev) -> Verdict:
    host = world.host(dev.node)
    failures = static_failures(part, dev, host)
    held = world.usage(dev.uuid)
    share = share_for(part, dev, held)
    if part.partition is not None and share is None:
        failures.append(PARTITION)
    failures += capacity_failures(world, dev, held, share)
    ordered = tuple(sorted(set(failures), key=DEVICE_ORDER.index))
    return Verdict(share if not ordered else None, ordered)


def usable(world: World, part: Any, dev: Dev) -> Share | None:
    """The share the part gets on ``dev`` now, or None; a device on an unschedulable node is never usable."""
    if not world.host(dev.node).schedulable:
        return None
    return judge(world, part, dev).share


def host_fits(world: World, request: Any, node: str) -> bool:
    host = world.host(node)
    return (
        host.schedulable
        and host.cpu_free >= request.host_cpu_milli
        and host.mem_free >= request.host_memory_mib
    )


Assignment = tuple[tuple[str, ...], ...]
"""Per part, the uuids it takes (each part's devices on one node, all devices distinct)."""


def _part_choices(world: World, part: Any) -> dict[str, list[tuple[str, ...]]]:
    """Per node, every set of ``count`` devices there that each take the part now."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for host in world.hosts:
        ok = [d.uuid for d in world.on(host.name) if usable(world, part, d) is not None]
        sets = list(combinations(ok, part.count))
        if sets:
            out[host.name] = sets
    return out


def feasible(world: World, request: Any) -> Iterator[tuple[str, Assignment]]:
    """Every placement the rules allow: (the node charged the host share, per part its devices)."""
    if not request.parts:
        for host in world.hosts:
            if host_fits(world, request, host.name):
                yield host.name, ()
        return
    choices = [_part_choices(world, part) for part in request.parts]
    if request.same_node:
        for host in world.hosts:
            if not host_fits(world, request, host.name) or any(host.name not in c for c in choices):
                continue
            for combo in product(*(c[host.name] for c in choices)):
                if _disjoint(combo):
                    yield host.name, combo
        return
    per_part = [[(node, s) for node, sets in c.items() for s in sets] for c in choices]
    for picked in product(*per_part):
        chosen: Assignment = tuple(s for _, s in picked)
        nodes = {node for node, _ in picked}
        if _disjoint(chosen) and all(host_fits(world, request, n) for n in nodes):
            yield picked[0][0], chosen


def holds_all_parts(world: World, request: Any, node: str) -> bool:
    """Whether the node's devices take every part of the request at once, each on devices of its own."""
    per_part = [_part_choices(world, part).get(node, []) for part in request.parts]
    return any(_disjoint(combo) for combo in product(*per_part))


def _disjoint(sets: Sequence[tuple[str, ...]]) -> bool:
    flat = [u for s in sets for u in s]
    return len(flat) == len(set(flat))


def grants_of(world: World, request: Any, assignment: Assignment) -> list[tuple[int, str, Share]]:
    """(part index, uuid, share) of every grant of an assignment."""
    out = []
    for i, (part, uuids) in enumerate(zip(request.parts, assignment, strict=True)):
        for uuid in uuids:
            share = usable(world, part, world.device(uuid))
            assert share is not None
            out.append((i, uuid, share))
    return out


def check_placement(world: World, request: Any, node: str, grants: Sequence[Any]) -> list[str]:
    """Every way a placement the engine returned breaks the rules (empty: the rules allow it)."""
    problems = []
    by_part: dict[int, list[Any]] = {}
    for g in grants:
        by_part.setdefault(g.part, []).append(g)
    uuids = [g.uuid for g in grants]
    if len(set(uuids)) != len(uuids):
        problems.append("a device is granted twice")
    for i, part in enumerate(request.parts):
        mine = by_part.get(i, [])
        if len(mine) != part.count:
            problems.append(f"part {i} got {len(mine)} devices, asked {part.count}")
        if len({g.node for g in mine}) > 1:
            problems.append(f"part {i} spans nodes")
        for g in mine:
            dev = world.device(g.uuid)
            if g.node != dev.node:
                problems.append(f"{g.uuid} reported on {g.node}, is on {dev.node}")
            verdict = judge(world, part, dev)
            if not verdict.ok or not world.host(dev.node).schedulable:
                problems.append(f"part {i} on {g.uuid} breaks {verdict.failures or ('unschedulable node',)}")
                continue
            share = verdict.share
            assert share is not None
            got = (g.memory_mib, g.cores, g.exclusive, g.partition)
            if got != (share.memory_mib, share.cores, share.exclusive, share.partition):
                problems.append(f"part {i} on {g.uuid} granted {got}, the rules give {share}")
    if set(by_part) - set(range(len(request.parts))):
        problems.append("a grant names a part the request does not have")
    nodes = {g.node for g in grants} | {node}
    if request.same_node and len(nodes) > 1:
        problems.append(f"same_node placement spans {sorted(nodes)}")
    for n in sorted(nodes):
        if not host_fits(world, request, n):
            problems.append(f"node {n} lacks the host CPU or memory (or is unschedulable)")
    return problems


def fits_empty(world: World, request: Any) -> bool:
    """Whether the request could fit this cluster once everything is released, every device is healthy and
    every node schedulable (what ``InsufficientResources.permanent`` judges)."""
    empty = World(
        [Host(h.name, h.cpu_total, h.mem_total) for h in world.hosts],
        [_healed(d) for d in world.devices],
        {},
        world.memory_factor,
        world.core_capacity,
    )
    return next(feasible(empty, request), None) is not None


def _healed(dev: Dev) -> Dev:
    return Dev(
        dev.uuid, dev.node, dev.index, dev.vendor, dev.model, dev.memory_mib, dev.split, dev.aliases, dev.numa,
        True, dev.precisions, dev.profiles,
    )
