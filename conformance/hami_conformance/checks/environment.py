"""The allocation environment: visible devices and the limiter variables, against independent facts.

The ids in the visible-devices variables are checked against the devices as discovery
reported them (uuid, index, the ``*_id`` attributes) and the partition ids the ledger
records; the limiter variables against the ledger's grants and the region file's contents.
The adapter's own ``visible_device_id`` is never the reference: a bug it shares with
``environment()`` must not pass.
"""

from __future__ import annotations

from pathlib import Path

from hami_conformance.bench import Bench, CheckFailed, ConfiguredOff, capacity, expect, share
from hami_conformance.checks import check
from hami_devices import limiter
from hami_devices.device import Device
from hami_devices.errors import LimiterError
from hami_devices.models import DeviceHandle, Grant

MIB = 1024 * 1024


def _multi(bench: Bench, cores: int = 30) -> DeviceHandle:
    """Two devices from the end of a node's healthy list, pinned by uuid.

    Their indexes differ from their positions in the grant list (0, 1), so an
    environment that numbers grants instead of naming devices shows.
    """
    group = bench.same_node_group(2)
    chosen = sorted(group, key=lambda d: d.info.index)[-2:]
    memory = max(1, min(capacity(d).memory_mib for d in chosen) // 4)
    request = share(memory, cores, count=len(chosen), uuids=[d.uuid for d in chosen])
    return bench.allocate_many(chosen, request)


def _vendor_grants(bench: Bench, handle: DeviceHandle) -> list[Grant]:
    return [g for g in handle.grants if g.vendor == bench.adapter.name]


def _limiter_on(bench: Bench) -> None:
    level = bench.adapter.config.device_plugin.isolation_level
    if level == "none":
        raise ConfiguredOff("the configuration sets isolation-level 'none': the limiter is off")


def device_names(device: Device) -> dict[str, str]:
    """The ids discovery reported for one device, by namespace."""
    info = device.info
    names = {"uuid": info.uuid, "index": str(info.index)}
    for key, value in info.attributes.items():
        if key.endswith("_id") and value:
            names[f"attribute {key}"] = str(value)
    return names


def partition_ids(grant: Grant) -> set[str]:
    """A partition id as the ledger records it; a ``#`` starts adapter-private detail."""
    if not grant.partition_uuid:
        return set()
    return {grant.partition_uuid, grant.partition_uuid.split("#", 1)[0]}


def names_device(value: str, grant: Grant, device: Device, node: list[Device]) -> str | None:
    """None when ``value`` names the granted device (or its partition) and no other device of
    the node in the same namespace; else what is wrong with it."""
    if value in partition_ids(grant):
        return None
    own = device_names(device)
    for namespace, name in own.items():
        if name != value:
            continue
        others = [d.uuid for d in node if d is not device and device_names(d).get(namespace) == value]
        if not others:
            return None
        return f"{value!r} is the {namespace} of {device.uuid} but also of {others}"
    named = [f"{d.uuid} ({ns})" for d in node if d is not device for ns, n in device_names(d).items() if n == value]
    if named:
        return f"{value!r} names {', '.join(named)}, not the granted device {device.uuid}"
    return f"{value!r} is none of {device.uuid}'s ids as discovery reported them ({sorted(own.values())})"


@check("env.visible-devices")
def visible_devices(bench: Bench) -> None:
    handle = _multi(bench)
    recorded = bench.recorded(handle)
    grants = _vendor_grants(bench, recorded)
    for var in bench.adapter.visible_devices_env:
        expect(var in handle.env, f"{var} is not in the allocation environment {sorted(handle.env)}")
        ids = handle.env[var].split(",")
        expect(len(ids) == len(grants), f"{var}={handle.env[var]!r} names {len(ids)} devices for {len(grants)} grants")
        for position, (value, grant) in enumerate(zip(ids, grants, strict=True)):
            device = bench.by_uuid(grant.uuid)
            node = [d for d in bench.devices if d.info.node == device.info.node]
            problem = names_device(value, grant, device, node)
            expect(problem is None, f"{var} entry {position} for grant on {grant.uuid}: {problem}")


def _region_limits(path: str) -> list[limiter.DeviceUsageRecord]:
    try:
        with limiter.Region.open(path) as region:
            return region.device_usage()
    except LimiterError as exc:
        raise CheckFailed(f"the limiter region {path} cannot be opened: {exc}") from exc


def _shim(bench: Bench) -> Path:
    shim = bench.adapter.limiter_shim
    expect(shim, "the adapter declares memory-limit but names no limiter_shim")
    assert shim is not None
    try:
        return limiter.shim_library(shim)
    except LimiterError as exc:
        raise CheckFailed(f"the adapter's limiter_shim {shim!r} does not resolve: {exc}") from exc


@check("env.limiter-memory")
def limiter_memory(bench: Bench) -> None:
    _limiter_on(bench)
    shim = _shim(bench)
    handle = _multi(bench)
    env = handle.env
    recorded = bench.recorded(handle)
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    matching = [p for p in preload if Path(p).is_file() and Path(p).resolve() == shim.resolve()]
    expect(matching, f"LD_PRELOAD={env.get('LD_PRELOAD')!r} does not preload the shim {shim}")
    region = env.get("HAMI_REGION_PATH")
    expect(region, "HAMI_REGION_PATH is not set")
    assert region is not None
    expect(Path(region).is_file(), f"HAMI_REGION_PATH {region} does not exist")
    expect(
        recorded.region_for(recorded.grants[0].node, bench.adapter.name) == region,
        f"the ledger records regions {recorded.regions}, the environment names {region}",
    )
    grants = _vendor_grants(bench, recorded)
    records = _region_limits(region)
    expect(len(records) == len(grants), f"the region holds {len(records)} devices for {len(grants)} grants")
    for position, (grant, record) in enumerate(zip(grants, records, strict=True)):
        want = grant.memory_mib * MIB
        expect(
            record.memory_limit_bytes == want,
            f"region device {position} limits memory to {record.memory_limit_bytes} bytes, "
            f"the ledger's grant on {grant.uuid} is {grant.memory_mib} MiB",
        )
        var = f"HAMI_DEVICE_MEMORY_LIMIT_{position}"
        try:
            value = limiter.parse_bytes(env.get(var, ""))
        except LimiterError:
            value = None
        expect(value == want, f"{var}={env.get(var)!r}, the ledger's grant on {grant.uuid} is {grant.memory_mib} MiB")
    bench.release(handle)
    expect(not Path(region).exists(), f"the region {region} is still there after release")


def expected_core_limit(grant: Grant) -> int:
    """Shared grants are throttled to their cores; exclusive grants and hardware partitions are not."""
    return 0 if grant.exclusive or grant.cores >= 100 or grant.partition else grant.cores


@check("env.limiter-compute")
def limiter_compute(bench: Bench) -> None:
    _limiter_on(bench)
    level = bench.adapter.config.device_plugin.isolation_level
    if level != "hard":
        raise ConfiguredOff(f"the configuration sets isolation-level {level!r}: compute is not limited")
    shared = _multi(bench, cores=30)
    grants = _vendor_grants(bench, bench.recorded(shared))
    records = _region_limits(shared.env.get("HAMI_REGION_PATH", ""))
    for position, grant in enumerate(grants):
        var = f"HAMI_DEVICE_CORE_LIMIT_{position}"
        want = expected_core_limit(grant)
        got = shared.env.get(var)
        expect(got == str(want), f"{var}={got!r}, the ledger's grant has {grant.cores}%")
        expect(
            position < len(records) and records[position].core_limit_pct == want,
            f"region device {position} has core limit "
            f"{records[position].core_limit_pct if position < len(records) else 'missing'}, expected {want}",
        )
    bench.release(shared)
    device = bench.device()
    exclusive = bench.allocate_on(device, share(1, 100))
    value = exclusive.env.get("HAMI_DEVICE_CORE_LIMIT_0")
    expect(value == "0", f"HAMI_DEVICE_CORE_LIMIT_0={value!r} for an exclusive grant, expected '0' (no limit)")
    records = _region_limits(exclusive.env.get("HAMI_REGION_PATH", ""))
    expect(records and records[0].core_limit_pct == 0, "the region throttles an exclusive grant")
