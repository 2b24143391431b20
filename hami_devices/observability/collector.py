"""The Prometheus collector: one snapshot per scrape, turned into metric families.

A reading that is not available is left out, never exported as 0: a device
whose library does not report power has no ``hami_device_power_watts`` series,
and a vendor whose collector timed out has no live readings at all (its
``hami_exporter_collector_up`` says 0).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami_devices.device import Device
from hami_devices.models import DeviceHandle, Grant, is_available
from hami_devices.observability import names
from hami_devices.observability.names import MetricName
from hami_devices.observability.regions import GrantReading
from hami_devices.observability.snapshot import Sampler, Snapshot

MIB = 1024 * 1024


def _gauge(metric: MetricName) -> GaugeMetricFamily:
    return GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels))


def _counter(metric: MetricName) -> CounterMetricFamily:
    return CounterMetricFamily(metric.name, metric.help, labels=list(metric.labels))


@dataclass(frozen=True)
class _DeviceFacts:
    node: str
    vendor: str
    model: str
    uuid: str
    index: str
    pci_bus_id: str

    def labels(self) -> list[str]:
        return [self.node, self.vendor, self.model, self.uuid, self.index, self.pci_bus_id]


def _facts(device: Device) -> _DeviceFacts:
    info = device.info
    return _DeviceFacts(info.node, info.vendor, info.model, info.uuid, str(info.index), info.pci_bus_id or "")


def _grant_facts(grant: Grant, known: dict[str, _DeviceFacts]) -> _DeviceFacts:
    """The device labels of a grant: from the discovered device where this exporter sees it."""
    found = known.get(grant.uuid)
    return found or _DeviceFacts(grant.node, grant.vendor, grant.model, grant.uuid, str(grant.index), "")


def metadata_labels(handle: DeviceHandle) -> list[str]:
    """workload, namespace, pod, container, queue, owner: from the metadata, with the request's name and queue
    standing in for a workload and queue the caller did not name."""
    meta = handle.metadata
    fallback = {"workload": handle.request.name or "", "queue": handle.request.queue}
    return [meta.get(key, fallback.get(key, "")) for key in names.METADATA_LABELS]


class HamiCollector(Collector):
    """Registered in a ``CollectorRegistry``; every ``collect()`` takes a fresh snapshot (shared with a
    concurrent observer pass, see ``Sampler``)."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def describe(self) -> list[Metric]:
        return []  # no collection at registration time: the first scrape is the first read of the hardware

    def collect(self) -> Iterator[Metric]:
        snapshot = self.sampler.snapshot()
        yield from families(snapshot)


def families(snapshot: Snapshot) -> list[Metric]:
    """The metric families of one snapshot."""
    out: list[Metric] = []
    known = {d.uuid: _facts(d) for d in snapshot.devices}
    out.extend(_device_families(snapshot, known))
    if snapshot.handles is not None:
        out.extend(_allocation_families(snapshot, snapshot.handles, known))
    out.extend(_counter_families(snapshot))
    up, seconds = _gauge(names.COLLECTOR_UP), _gauge(names.COLLECTOR_SECONDS)
    for name, outcome in sorted(snapshot.outcomes.items()):
        up.add_metric([name], 1.0 if outcome.up else 0.0)
        seconds.add_metric([name], outcome.seconds)
    out.extend([up, seconds])
    return out


def _device_families(snapshot: Snapshot, known: dict[str, _DeviceFacts]) -> list[Metric]:
    info, total = _gauge(names.DEVICE_INFO), _gauge(names.DEVICE_MEMORY_TOTAL)
    used, util = _gauge(names.DEVICE_MEMORY_USED), _gauge(names.DEVICE_UTILIZATION)
    temp, power = _gauge(names.DEVICE_TEMPERATURE), _gauge(names.DEVICE_POWER)
    healthy, sharers = _gauge(names.DEVICE_HEALTHY), _gauge(names.DEVICE_SHARERS)
    granted_mem, granted_cores = _gauge(names.DEVICE_MEMORY_GRANTED), _gauge(names.DEVICE_CORES_GRANTED)
    holders: dict[str, list[Grant]] = {}
    for handle in snapshot.handles or []:
        for grant in handle.grants:
            holders.setdefault(grant.uuid, []).append(grant)
    for device in snapshot.devices:
        labels = known[device.uuid].labels()
        numa = device.info.numa_node
        info.add_metric([*labels, "" if numa is None else str(numa)], 1.0)
        total.add_metric(labels, device.info.memory_mib * MIB)
        readings = snapshot.readings.get(device.uuid)
        if readings is not None:
            if is_available(readings.memory_used_mib):
                used.add_metric(labels, float(readings.memory_used_mib) * MIB)
            if is_available(readings.utilization_pct):
                util.add_metric(labels, float(readings.utilization_pct) / 100.0)
            if is_available(readings.temperature_c):
                temp.add_metric(labels, float(readings.temperature_c))
            if is_available(readings.power_w):
                power.add_metric(labels, float(readings.power_w))
            health = readings.health or device.info.health
            healthy.add_metric(labels, 1.0 if health == "healthy" else 0.0)
        if snapshot.handles is not None:
            grants = holders.get(device.uuid, [])
            sharers.add_metric(labels, float(len(grants)))
            granted_mem.add_metric(labels, float(sum(g.memory_mib for g in grants)) * MIB)
            granted_cores.add_metric(labels, sum(g.cores for g in grants) / 100.0)
    return [info, total, used, util, temp, power, healthy, sharers, granted_mem, granted_cores]


def _allocation_families(
    snapshot: Snapshot, handles: list[DeviceHandle], known: dict[str, _DeviceFacts]
) -> list[Metric]:
    info, limit = _gauge(names.ALLOCATION_INFO), _gauge(names.ALLOCATION_MEMORY_LIMIT)
    cores, used = _gauge(names.ALLOCATION_CORES_LIMIT), _gauge(names.ALLOCATION_MEMORY_USED)
    peak, util = _gauge(names.ALLOCATION_MEMORY_PEAK), _gauge(names.ALLOCATION_UTILIZATION)
    procs, start = _gauge(names.ALLOCATION_PROCESSES), _gauge(names.ALLOCATION_START)
    live: dict[tuple[str, str], GrantReading] = {}
    for region in snapshot.regions:
        for uuid, reading in region.grants.items():
            live[(region.handle_id, uuid)] = reading
    for handle in handles:
        identity = metadata_labels(handle)
        for grant in handle.grants:
            labels = [*_grant_facts(grant, known).labels(), handle.id, *identity]
            info.add_metric([*labels, grant.partition or "", "true" if grant.exclusive else "false"], 1.0)
            limit.add_metric(labels, float(grant.memory_mib) * MIB)
            cores.add_metric(labels, grant.cores / 100.0)
            start.add_metric(labels, handle.created_at)
            found = live.get((handle.id, grant.uuid))
            if found is None:
                continue  # no region here (another node, isolation off) or the limiter collector is down
            used.add_metric(labels, float(found.memory_used_bytes))
            peak.add_metric(labels, float(found.memory_peak_bytes))
            procs.add_metric(labels, float(sum(1 for p in found.processes if p.alive)))
            if found.utilization_ratio is not None:
                util.add_metric(labels, found.utilization_ratio)
    return [info, limit, cores, used, peak, util, procs, start]


def _counter_families(snapshot: Snapshot) -> list[Metric]:
    tally = snapshot.tally
    if tally is None:
        return []  # counters come from the ledger's event log; never reset them to 0 because it was busy
    granted, released = _counter(names.GRANTED), _counter(names.RELEASED)
    granted.add_metric([], float(tally.by_kind.get("allocation.granted", 0)))
    released.add_metric([], float(tally.by_kind.get("allocation.released", 0)))
    evictions, refusals = _counter(names.EVICTIONS), _counter(names.REFUSALS)
    for reclaimer, n in sorted(tally.evictions.items()):
        evictions.add_metric([reclaimer], float(n))
    for reason, n in sorted(tally.refusals.items()):
        refusals.add_metric([reason], float(n))
    limiter, events = _counter(names.LIMITER_REFUSALS), _counter(names.EVENTS)
    for uuid, n in sorted(tally.limiter_refusals.items()):
        limiter.add_metric([uuid], float(n))
    for kind, n in sorted(tally.by_kind.items()):
        events.add_metric([kind], float(n))
    return [granted, released, evictions, refusals, limiter, events]
