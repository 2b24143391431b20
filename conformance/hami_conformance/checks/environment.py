"""The allocation environment: visible devices and the limiter variables."""

from __future__ import annotations

import os
from pathlib import Path

from hami_conformance.bench import Bench, NotApplicable, capacity, expect, share
from hami_conformance.checks import check
from hami_devices.models import DeviceHandle, Grant


def _multi(bench: Bench, cores: int = 30) -> DeviceHandle:
    group = bench.same_node_group(1)[:2]
    memory = max(1, min(capacity(d).memory_mib for d in group) // 4)
    return bench.allocate_many(group, share(memory, cores, count=len(group)))


def _accepted_ids(bench: Bench, grant: Grant) -> set[str]:
    ids = {grant.uuid, str(grant.index), bench.adapter.visible_device_id(grant)}
    if grant.partition_uuid:
        ids.add(grant.partition_uuid)
    return ids


def _vendor_grants(bench: Bench, handle: DeviceHandle) -> list[Grant]:
    return [g for g in handle.grants if g.vendor == bench.adapter.name]


def _limiter_on(bench: Bench) -> None:
    level = bench.adapter.config.device_plugin.isolation_level
    if level == "none":
        raise NotApplicable("the configuration sets isolation-level 'none': the limiter is off")


@check("env.visible-devices")
def visible_devices(bench: Bench) -> None:
    handle = _multi(bench)
    grants = _vendor_grants(bench, handle)
    for var in bench.adapter.visible_devices_env:
        expect(var in handle.env, f"{var} is not in the allocation environment {sorted(handle.env)}")
        ids = handle.env[var].split(",")
        expect(len(ids) == len(grants), f"{var}={handle.env[var]!r} names {len(ids)} devices for {len(grants)} grants")
        for position, (value, grant) in enumerate(zip(ids, grants, strict=True)):
            expect(
                value in _accepted_ids(bench, grant),
                f"{var} entry {position} is {value!r}, which does not identify grant {grant.uuid}",
            )


@check("env.limiter-memory")
def limiter_memory(bench: Bench) -> None:
    _limiter_on(bench)
    shim = bench.adapter.limiter_shim
    expect(shim, "the adapter declares memory-limit but names no limiter_shim")
    handle = _multi(bench)
    env = handle.env
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    matching = [p for p in preload if os.path.basename(p) == shim]
    expect(matching, f"LD_PRELOAD={env.get('LD_PRELOAD')!r} does not name the shim {shim}")
    expect(Path(matching[0]).is_file(), f"the preloaded shim {matching[0]} does not exist")
    region = env.get("HAMI_REGION_PATH")
    expect(region, "HAMI_REGION_PATH is not set")
    assert region is not None
    expect(Path(region).is_file(), f"HAMI_REGION_PATH {region} does not exist")
    expect(
        handle.region_for(handle.grants[0].node, bench.adapter.name) == region,
        f"handle.regions {handle.regions} does not record HAMI_REGION_PATH {region}",
    )
    for position, grant in enumerate(_vendor_grants(bench, handle)):
        var = f"HAMI_DEVICE_MEMORY_LIMIT_{position}"
        expect(env.get(var) == f"{grant.memory_mib}m", f"{var}={env.get(var)!r}, grant is {grant.memory_mib} MiB")
    bench.release(handle)
    expect(not Path(region).exists(), f"the region {region} is still there after release")


@check("env.limiter-compute")
def limiter_compute(bench: Bench) -> None:
    _limiter_on(bench)
    level = bench.adapter.config.device_plugin.isolation_level
    if level != "hard":
        raise NotApplicable(f"the configuration sets isolation-level {level!r}: compute is not limited")
    shared = _multi(bench, cores=30)
    for position, grant in enumerate(_vendor_grants(bench, shared)):
        var = f"HAMI_DEVICE_CORE_LIMIT_{position}"
        expect(shared.env.get(var) == str(grant.cores), f"{var}={shared.env.get(var)!r}, grant has {grant.cores}%")
    bench.release(shared)
    device = bench.device()
    exclusive = bench.allocate_on(device, share(1, 100))
    value = exclusive.env.get("HAMI_DEVICE_CORE_LIMIT_0")
    expect(value == "0", f"HAMI_DEVICE_CORE_LIMIT_0={value!r} for an exclusive grant, expected '0' (no limit)")
