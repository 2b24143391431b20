"""Monitoring: the Metrics schema, used <= total, not-available instead of 0, allocations, processes."""

from __future__ import annotations

import math

from hami_conformance.bench import Bench, capacity, expect, share
from hami_conformance.checks import check
from hami_conformance.invariants import device_problems
from hami_devices.device import Device, DeviceReadings
from hami_devices.models import NOT_AVAILABLE, Health, Metrics

ZERO_IS_MISSING = ("temperature_c", "power_w")
"""Readings a powered device never reports as exactly 0: a 0 there is a missing metric in disguise."""

FIELDS = ("memory_used_mib", "utilization_pct", "temperature_c", "power_w")


def _load(bench: Bench) -> None:
    """Put an allocation on every healthy device so monitor() has something to report."""
    for device in bench.healthy():
        bench.allocate_on(device, share(max(1, capacity(device).memory_mib // 4), min(20, capacity(device).cores)))


def _value_problem(name: str, value: object) -> str | None:
    if value == NOT_AVAILABLE:
        return None
    if value is None:
        return f"{name} is None; a metric that cannot be read must be {NOT_AVAILABLE!r}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{name} is {value!r}; expected a number or {NOT_AVAILABLE!r}"
    if not math.isfinite(value):
        return f"{name} is {value!r}; expected a finite number or {NOT_AVAILABLE!r}"
    if value < 0:
        return f"{name} is negative ({value})"
    return None


@check("monitor.schema")
def schema(bench: Bench) -> None:
    _load(bench)
    for device in bench.devices:
        metrics = device.monitor()
        expect(isinstance(metrics, Metrics), f"{device.uuid}: monitor() returned {type(metrics).__name__}")
        again = Metrics.model_validate_json(metrics.model_dump_json())
        expect(again == metrics, f"{device.uuid}: Metrics changed through JSON")
        expect(
            (metrics.uuid, metrics.vendor, metrics.model) == (device.uuid, device.info.vendor, device.info.model),
            f"{device.uuid}: metrics are for {metrics.uuid} {metrics.vendor}/{metrics.model}",
        )
        expect(
            metrics.memory_total_mib == device.info.memory_mib,
            f"{device.uuid}: memory total {metrics.memory_total_mib} != device memory {device.info.memory_mib}",
        )
        expect(isinstance(metrics.health, Health), f"{device.uuid}: health {metrics.health!r}")


@check("monitor.used-le-total")
def used_le_total(bench: Bench) -> None:
    _load(bench)
    for device in bench.devices:
        metrics = device.monitor()
        problems = device_problems(bench, device)
        util = metrics.utilization_pct
        if util != NOT_AVAILABLE:
            expect(0 <= float(util) <= 100, f"{device.uuid}: utilization {util} is outside 0..100")
        for usage in metrics.allocations:
            if usage.utilization_pct != NOT_AVAILABLE:
                expect(0 <= float(usage.utilization_pct) <= 100, f"{device.uuid}: allocation utilization {usage}")
        expect(not problems, "; ".join(problems))


def _readings(device: Device) -> DeviceReadings:
    return device.read()


@check("monitor.not-available-not-zero")
def not_available_not_zero(bench: Bench) -> None:
    _load(bench)
    problems: list[str] = []
    for device in bench.devices:
        readings = _readings(device)
        metrics = device.monitor()
        for name in FIELDS:
            for source, value in (("read()", getattr(readings, name)), ("monitor()", getattr(metrics, name))):
                problem = _value_problem(f"{device.uuid} {source}.{name}", value)
                if problem:
                    problems.append(problem)
        for name in ZERO_IS_MISSING:
            value = getattr(metrics, name)
            if value != NOT_AVAILABLE and isinstance(value, int | float) and value == 0:
                problems.append(
                    f"{device.uuid}: {name} is 0 - a device that cannot read it must report {NOT_AVAILABLE!r}"
                )
        for key, value in metrics.extra.items():
            problem = _value_problem(f"{device.uuid} extra[{key!r}]", value)
            if problem:
                problems.append(problem)
        for usage in metrics.allocations:
            for name in ("memory_used_mib", "utilization_pct"):
                problem = _value_problem(f"{device.uuid} allocation {usage.handle_id[:8]} {name}", getattr(usage, name))
                if problem:
                    problems.append(problem)
    expect(not problems, "; ".join(problems))


@check("monitor.allocations")
def allocations_listed(bench: Bench) -> None:
    device = bench.device()
    cap = capacity(device)
    a = bench.allocate_on(device, share(max(1, cap.memory_mib // 4), min(10, cap.cores)))
    b = bench.allocate_on(device, share(max(1, cap.memory_mib // 8), min(20, cap.cores)))
    listed = {u.handle_id: u for u in device.monitor().allocations}
    expect(set(listed) == {a.id, b.id}, f"monitor lists {sorted(listed)}, live are {sorted([a.id, b.id])}")
    for handle in (a, b):
        grant = bench.recorded(handle).grants[0]
        usage = listed[handle.id]
        expect(
            (usage.memory_limit_mib, usage.cores_limit) == (grant.memory_mib, grant.cores),
            f"allocation {handle.id[:8]}: limits {usage.memory_limit_mib} MiB/{usage.cores_limit}%, "
            f"grant {grant.memory_mib} MiB/{grant.cores}%",
        )
    bench.release(a)
    listed_after = [u.handle_id for u in device.monitor().allocations]
    expect(listed_after == [b.id], f"after releasing {a.id[:8]} monitor lists {listed_after}")


@check("monitor.processes")
def processes(bench: Bench) -> None:
    _load(bench)
    for device in bench.devices:
        metrics = device.monitor()
        entries = list(metrics.processes) + [p for a in metrics.allocations for p in a.processes]
        for proc in entries:
            expect(proc.pid > 0, f"{device.uuid}: process entry with pid {proc.pid}")
            problem = _value_problem(f"{device.uuid} pid {proc.pid} memory", proc.memory_used_mib)
            expect(problem is None, problem or "")


@check("monitor.health-events")
def health_events(bench: Bench) -> None:
    for device in bench.devices:
        health = device.refresh_health()
        expect(isinstance(health, Health), f"{device.uuid}: refresh_health() returned {health!r}")
        reported = device.monitor().health
        expect(reported == health, f"{device.uuid}: refresh_health() says {health}, monitor() says {reported}")
