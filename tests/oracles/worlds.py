"""Random small clusters and requests that reach the rules' boundaries, and the product's view of them.

A world is drawn as the oracle's ``World`` plus the grants that fill it, then
built through the public API only: ``ClusterState(...).add_node`` with
``DeviceInfo`` devices, the grants booked with ``ClusterState.assume``.
The draws aim at the edges: memory asked to the MiB of what is left, cores to
the point of what is left, split counts one short of full or full, exclusive
holders, devices filled to the MiB, unhealthy devices, unschedulable nodes,
hosts without the CPU or memory asked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hypothesis import strategies as st

import hami_devices as hd
from hami_devices.plugin import DeviceInfo, DeviceTraits, Grant, PartitionProfile
from hami_devices.scheduler import ClusterState
from tests.oracles.placement_rules import Dev, Held, Host, Profile, World

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True)
class Model:
    vendor: str
    name: str
    memory_mib: int
    precisions: frozenset[str] | None  # None: a device without traits
    aliases: tuple[str, ...] = ()
    profiles: tuple[Profile, ...] = ()


# Small memories put the boundaries within reach of a few draws.
MODELS = (
    Model("nvidia", "T4", 15_360, frozenset({"fp32", "fp16", "int8"}), ("Tesla T4",)),
    Model(
        "nvidia",
        "A100-80GB",
        81_920,
        frozenset({"fp32", "tf32", "bf16", "fp16", "int8"}),
        ("A100 80GB",),
        (Profile("1g.10gb", 10_240, 14, 7), Profile("3g.40gb", 40_960, 42, 2)),
    ),
    Model("nvidia", "H100", 81_920, frozenset(PRECISIONS)),
    Model(
        "ascend",
        "910B3",
        65_536,
        frozenset({"fp32", "bf16", "fp16", "int8"}),
        (),
        # vir02 runs out of instances long before memory or cores: the instance count is what binds
        (Profile("vir02", 2_048, 5, 2), Profile("vir05_1c_16g", 16_384, 25, 4), Profile("vir10_3c_32g", 32_768, 50, 2)),
    ),
    Model("cambricon", "MLU370-X8", 49_152, frozenset({"fp32", "fp16", "bf16", "int8"}), ("MLU370 X8",)),
    Model("acme", "X1", 8_192, None),
)
MEMORY_FACTORS = (Fraction(1), Fraction(1), Fraction(3, 2), Fraction(2), Fraction(1, 2), Fraction(3, 4))
CORE_CAPACITIES = (100, 100, 100, 150, 50)


@dataclass
class Drawn:
    """A world, the grants and host shares that fill it, and the product's state built from them."""

    world: World
    grants: dict[str, list[tuple[int, int, bool, str | None]]] = field(default_factory=dict)
    host_use: dict[str, tuple[int, int]] = field(default_factory=dict)
    models: dict[str, Model] = field(default_factory=dict)

    def cluster(self) -> ClusterState:
        w = self.world
        cluster = ClusterState(memory_overcommit=float(w.memory_factor), core_capacity=w.core_capacity)
        for host in w.hosts:  # every device healthy at first: grants are booked before health is lost
            infos = [self._info(d, healthy=True) for d in w.on(host.name)]
            cluster.add_node(host.name, host.cpu_total, host.mem_total, infos)
            cpu, mem = self.host_use.get(host.name, (0, 0))
            if cpu or mem:
                cluster.assume(host.name, [], host_cpu_milli=cpu, host_memory_mib=mem)
        for dev in w.devices:
            info = self._info(dev, healthy=True)
            for memory, cores, exclusive, partition in self.grants.get(dev.uuid, []):
                grant = Grant.on(info, 0, memory, cores, exclusive=exclusive, partition=partition)
                cluster.assume(dev.node, [grant])
            if not dev.healthy:
                cluster.set_health(dev.uuid, hd.Health.UNHEALTHY)
        for host in w.hosts:
            if not host.schedulable:
                cluster.set_schedulable(host.name, False)
        return cluster

    def _info(self, dev: Dev, *, healthy: bool | None = None) -> DeviceInfo:
        model = self.models[dev.uuid]
        traits = None
        if model.precisions is not None:
            traits = DeviceTraits(
                vendor=model.vendor,
                model=model.name,
                generation="g",
                year=2020,
                memory_mib=model.memory_mib,
                memory_bandwidth_gbps=1000.0,
                peak_tflops={p: 100.0 for p in model.precisions},
                interconnect={"kind": "pcie", "bandwidth_gbps": 32.0},
                tdp_watts=300.0,
                relative_cost=1.0,
                aliases=list(model.aliases),
            )
        return DeviceInfo(
            uuid=dev.uuid,
            index=dev.index,
            vendor=dev.vendor,
            model=dev.model,
            node=dev.node,
            memory_mib=dev.memory_mib,
            numa_node=dev.numa,
            health=hd.Health.HEALTHY if (dev.healthy if healthy is None else healthy) else hd.Health.UNHEALTHY,
            split_count=dev.split,
            traits=traits,
            partitions=[
                PartitionProfile(name=p.name, memory_mib=p.memory_mib, cores=p.cores, max_instances=p.max_instances)
                for p in dev.profiles
            ],
        )


def rarely(draw: Any, one_in: int) -> bool:
    """True about once in ``one_in`` draws (hypothesis favours the first choices, so the rare one is last)."""
    return bool(draw(st.sampled_from([False] * (one_in - 1) + [True])))


def _held(grants: list[tuple[int, int, bool, str | None]]) -> Held:
    return Held(
        sum(g[0] for g in grants),
        sum(g[1] for g in grants),
        len(grants),
        any(g[2] for g in grants),
        tuple(sorted(g[3] for g in grants if g[3])),
    )


FILLS = (
    "empty", "empty", "empty", "empty", "exclusive", "shares", "shares", "quiet", "full", "partitions", "partitions"
)
CARVED_FILLS = ("partitions", "partitions", "partitions", "empty", "shares")


def _fill(
    draw: Any, dev: Dev, cap: int, cores_cap: int, modes: tuple[str, ...] = FILLS
) -> list[tuple[int, int, bool, str | None]]:
    """Grants on one device that the rules allow, aimed at its limits."""
    mode = draw(st.sampled_from(modes))
    if mode == "empty" or dev.split < 1:
        return []
    if mode == "exclusive":
        if cores_cap < 100:
            return []
        return [(draw(st.sampled_from([0, 1_024, cap // 2, cap])), 100, True, None)]
    if mode == "partitions" and dev.profiles:
        out: list[tuple[int, int, bool, str | None]] = []
        one = draw(st.sampled_from([None, *dev.profiles]))  # a profile taken to its last instance, or a mix
        for _ in range(draw(st.integers(1, dev.split))):
            p = one or draw(st.sampled_from(dev.profiles))
            held = _held(out)
            if (
                held.partitions.count(p.name) < p.max_instances
                and held.memory_mib + p.memory_mib <= cap
                and held.cores + p.cores <= cores_cap
            ):
                out.append((p.memory_mib, p.cores, False, p.name))
        return out
    if mode == "quiet":  # sharers holding memory and no cores: room for cores, none for an exclusive part
        quiet: list[tuple[int, int, bool, str | None]] = []
        for _ in range(draw(st.integers(1, dev.split))):
            memory = draw(st.sampled_from([0, 1_024]))
            quiet.append((memory if _held(quiet).memory_mib + memory <= cap else 0, 0, False, None))
        return quiet
    sharers = draw(st.integers(1, dev.split)) if mode == "shares" else dev.split
    out = []
    memory_left, cores_left = cap, min(cores_cap, 99 * sharers)
    for i in range(sharers):
        last = i == sharers - 1
        if mode == "full" and last:  # the device filled to the MiB and the point
            memory, cores = memory_left, min(cores_left, 99)
        else:
            memory = draw(st.integers(0, memory_left // 2))
            cores = draw(st.integers(0, min(cores_left // 2, 99)))
        memory_left -= memory
        cores_left -= cores
        out.append((memory, cores, False, None))
    return out


@st.composite
def worlds(
    draw: Any, *, max_nodes: int = 4, max_devices: int = 4, core_capacity: int | None = None, carved: bool = False
) -> Drawn:
    """A cluster; ``carved``: only models with a partition catalog, their instances taken to the limits."""
    factor = draw(st.sampled_from(MEMORY_FACTORS))
    cores_cap = core_capacity if core_capacity is not None else draw(st.sampled_from(CORE_CAPACITIES))
    world = World([], [], {}, factor, cores_cap)
    drawn = Drawn(world)
    for n in range(draw(st.integers(1, max_nodes))):
        name = f"n{n}"
        host = Host(
            name,
            draw(st.sampled_from([32_000, 8_000, 2_000, 0])),
            draw(st.sampled_from([65_536, 4_096, 0])),
            schedulable=not rarely(draw, 10),
        )
        cpu_used = draw(st.sampled_from([0, 0, host.cpu_total // 2, host.cpu_total]))
        mem_used = draw(st.sampled_from([0, 0, host.mem_total // 2, host.mem_total]))
        host.cpu_used, host.mem_used = cpu_used, mem_used
        drawn.host_use[name] = (cpu_used, mem_used)
        world.hosts.append(host)
        for i in range(draw(st.integers(1, max_devices))):
            model = draw(st.sampled_from([m for m in MODELS if m.profiles or not carved]))
            aliases = (model.name, *model.aliases) if model.precisions is not None else ()
            dev = Dev(
                uuid=f"{name}-{model.vendor}-{i}",
                node=name,
                index=i,
                vendor=model.vendor,
                model=model.name,
                memory_mib=model.memory_mib,
                split=draw(st.sampled_from([10, 3, 2, 1])),
                aliases=aliases,
                numa=draw(st.sampled_from([None, 0, 1])),
                healthy=not rarely(draw, 8),
                precisions=model.precisions,
                profiles=model.profiles,
            )
            world.devices.append(dev)
            drawn.models[dev.uuid] = model
            grants = _fill(draw, dev, world.memory_capacity(dev), cores_cap, CARVED_FILLS if carved else FILLS)
            if grants:
                drawn.grants[dev.uuid] = grants
                world.held[dev.uuid] = _held(grants)
    return drawn


def _variant(draw: Any, name: str) -> str:
    """The same name as a user might write it (case, spaces, dashes, a vendor prefix)."""
    forms = [name, name.upper(), name.lower(), name.replace("-", " "), name.replace("-", "_")]
    if not name.lower().startswith(("nvidia", "tesla")):
        forms.append(f"NVIDIA {name}")
    return str(draw(st.sampled_from(forms)))


def _memory(draw: Any, world: World, dev: Dev) -> dict[str, Any]:
    left = world.memory_capacity(dev) - world.usage(dev.uuid).memory_mib
    kind = draw(st.sampled_from(["none", "none", "mib-edge", "mib", "mib-small", "percent"]))
    if kind == "none":
        return {}
    if kind == "mib-small":  # a different share of each model: the policies' scores tell devices apart
        return {"memory_mib": draw(st.sampled_from([1_024, 4_096, 8_000]))}
    if kind == "percent":
        return {"memory_percent": float(draw(st.sampled_from([1, 10, 25, 50, 75, 99, 100])))}
    if kind == "mib":
        return {"memory_mib": draw(st.integers(1, max(1, 2 * world.memory_capacity(dev))))}
    return {"memory_mib": max(1, left + draw(st.sampled_from([-1, 0, 0, 1])))}


def _cores(draw: Any, world: World, dev: Dev) -> int:
    left = world.core_capacity - world.usage(dev.uuid).cores
    edge = min(100, max(0, left + draw(st.sampled_from([-1, 0, 1]))))
    return int(draw(st.sampled_from([0, 0, 10, 50, 99, 100, 100, edge, edge])))


@st.composite
def parts(draw: Any, world: World, *, constrained: bool = True, carved: bool = False) -> dict[str, Any]:
    dev = draw(st.sampled_from(world.devices))
    part: dict[str, Any] = {"count": draw(st.sampled_from([1, 1, 1, 2, 3])), "cores": _cores(draw, world, dev)}
    part.update(_memory(draw, world, dev))
    other = draw(st.sampled_from(world.devices))
    choice = draw(st.sampled_from([None] * 10 + list(range(8)))) if constrained else None
    if choice == 0:
        part["vendors"] = [_variant(draw, dev.vendor)]
    elif choice == 1:
        part["exclude_vendors"] = [other.vendor.upper()]
    elif choice == 2:
        part["models"] = [_variant(draw, draw(st.sampled_from((dev.model, *dev.aliases))))]
    elif choice == 3:
        part["exclude_models"] = [_variant(draw, other.model)]
    elif choice == 4:
        part["uuids"] = sorted({dev.uuid, other.uuid})
    elif choice == 5:
        part["exclude_uuids"] = [other.uuid]
    elif choice == 6:
        part["models"] = [draw(st.sampled_from(["Z9", "T4", "H100"]))]  # maybe nothing in the cluster
    elif choice == 7:
        part["vendors"] = [draw(st.sampled_from(["nosuch", "acme"]))]
    profiled = [d for d in world.devices if d.profiles]
    if profiled and (carved or rarely(draw, 3)):
        target = draw(st.sampled_from(profiled))
        part["partition"] = draw(st.sampled_from(["auto", *(p.name for p in target.profiles), "no-such-profile"]))
        aim = draw(st.sampled_from(target.profiles))  # ask about one profile's size, so each can be the one chosen
        part.pop("memory_mib", None)
        part.pop("memory_percent", None)
        if draw(st.booleans()):
            part["memory_mib"] = aim.memory_mib - draw(st.sampled_from([0, 1]))
        part["cores"] = draw(st.sampled_from([0, aim.cores, min(100, aim.cores + 1)]))
    if rarely(draw, 5):  # devices without traits are never refused for it
        part["precision"] = draw(st.sampled_from(PRECISIONS))
    if constrained and rarely(draw, 6):
        part["numa_node"] = draw(st.sampled_from([0, 1]))
    return part


@st.composite
def requests(
    draw: Any,
    world: World,
    *,
    max_parts: int = 3,
    min_parts: int = 1,
    single: bool = False,
    constrained: bool = True,
    carved: bool = False,
) -> hd.ResourceRequest:
    host = {
        "host_cpu_milli": draw(st.sampled_from([0, 0, 0, 1_000, 8_000])),
        "host_memory_mib": draw(st.sampled_from([0, 0, 0, 2_048])),
    }
    if single:
        part = draw(parts(world, constrained=constrained, carved=carved))
        part["count"] = 1
        return hd.ResourceRequest(task_type="batch", parts=[part], **host)
    if min_parts == 1 and rarely(draw, 16):  # host CPU and memory only
        return hd.ResourceRequest(task_type="batch", host_cpu_milli=max(1, host["host_cpu_milli"]))
    count = draw(st.sampled_from([n for n in (1, 1, 1, 2, 3) if min_parts <= n <= max_parts]))
    drawn = [draw(parts(world, constrained=constrained, carved=carved)) for _ in range(count)]
    return hd.ResourceRequest(task_type="batch", parts=drawn, same_node=draw(st.booleans()), **host)


def capacity(world: World, dev: Dev) -> int:
    return max(world.memory_capacity(dev), 1)


def free_milli(world: World, dev: Dev) -> int:
    """A device's free share in thousandths: the scarcer of its free memory and free cores (0 when held
    exclusively or unhealthy)."""
    held = world.usage(dev.uuid)
    if held.exclusive or not dev.healthy:
        return 0
    memory = 1 - Fraction(held.memory_mib, capacity(world, dev))
    cores = 1 - Fraction(held.cores, max(world.core_capacity, 1))
    return min(1000, max(0, math.floor(min(memory, cores) * 1000)))
