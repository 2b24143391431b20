"""What one snapshot says, as series: (metric, label values, value), grouped by metric.

Both renderings read this: ``collector`` turns it into ``prometheus_client``
families (to embed in any registry), ``exposition`` into the text format with
label strings rendered once per series.  A reading that is not available is left
out, never exported as 0: a device whose library does not report power has no
``hami_device_power_watts`` series, and a vendor whose collector timed out has no
live readings at all (its ``hami_exporter_collector_up`` says 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_devices.device import Device
from hami_devices.models import DeviceHandle, Grant, is_available
from hami_devices.observability import names
from hami_devices.observability.names import MetricName
from hami_devices.observability.regions import GrantReading
from hami_devices.observability.snapshot import Snapshot

MIB = 1024 * 1024

Labels = tuple[str, ...]
Series = dict[MetricName, list[tuple[Labels, float]]]


@dataclass(frozen=True)
class GrantRow:
    """What never changes about one grant of an allocation: its labels and its limits."""

    uuid: str
    labels: Labels
    info: tuple[Labels, float]  # the static samples, built once: info, memory limit, cores limit
    limit: tuple[Labels, float]
    cores: tuple[Labels, float]


Rows = dict[str, list[GrantRow]]  # allocation id -> its grants' rows


def _facts(device: Device) -> Labels:
    info = device.info
    return (info.node, info.vendor, info.model, info.uuid, str(info.index), info.pci_bus_id or "")


def _grant_facts(grant: Grant, known: dict[str, Labels]) -> Labels:
    """The device labels of a grant: from the discovered device where this exporter sees it."""
    found = known.get(grant.uuid)
    return found or (grant.node, grant.vendor, grant.model, grant.uuid, str(grant.index), "")


def metadata_labels(handle: DeviceHandle) -> Labels:
    """workload, namespace, pod, container, queue, owner: from the metadata, with the request's name and queue
    standing in for a workload and queue the caller did not name."""
    meta = handle.metadata
    fallback = {"workload": handle.request.name or "", "queue": handle.request.queue}
    return tuple(meta.get(key, fallback.get(key, "")) for key in names.METADATA_LABELS)


def series(snapshot: Snapshot, seen: Rows | None = None, keep: Rows | None = None) -> Series:
    """Every series of the snapshot, in ``names.SERVED`` order (families stay contiguous).

    ``seen``: grant rows already worked out per allocation id (a handle never changes); the ones used
    now are put in ``keep``, so a caller can carry them to the next snapshot.
    """
    out: Series = {metric: [] for metric in names.SERVED}
    known = {d.uuid: _facts(d) for d in snapshot.devices}
    _devices(out, snapshot, known)
    if snapshot.handles is not None:
        _allocations(out, snapshot, snapshot.handles, known, seen or {}, {} if keep is None else keep)
    _counters(out, snapshot)
    for name, outcome in sorted(snapshot.outcomes.items()):
        out[names.COLLECTOR_UP].append(((name,), 1.0 if outcome.up else 0.0))
        out[names.COLLECTOR_SECONDS].append(((name,), outcome.seconds))
    return out


def _devices(out: Series, snapshot: Snapshot, known: dict[str, Labels]) -> None:
    holders: dict[str, list[Grant]] = {}
    for handle in snapshot.handles or []:
        for grant in handle.grants:
            holders.setdefault(grant.uuid, []).append(grant)
    for device in snapshot.devices:
        labels = known[device.uuid]
        numa = device.info.numa_node
        out[names.DEVICE_INFO].append(((*labels, "" if numa is None else str(numa)), 1.0))
        out[names.DEVICE_MEMORY_TOTAL].append((labels, float(device.info.memory_mib * MIB)))
        readings = snapshot.readings.get(device.uuid)
        if readings is not None:
            if is_available(readings.memory_used_mib):
                out[names.DEVICE_MEMORY_USED].append((labels, float(readings.memory_used_mib) * MIB))
            if is_available(readings.utilization_pct):
                out[names.DEVICE_UTILIZATION].append((labels, float(readings.utilization_pct) / 100.0))
            if is_available(readings.temperature_c):
                out[names.DEVICE_TEMPERATURE].append((labels, float(readings.temperature_c)))
            if is_available(readings.power_w):
                out[names.DEVICE_POWER].append((labels, float(readings.power_w)))
            health = readings.health or device.info.health
            out[names.DEVICE_HEALTHY].append((labels, 1.0 if health == "healthy" else 0.0))
        if snapshot.handles is not None:
            grants = holders.get(device.uuid, [])
            out[names.DEVICE_SHARERS].append((labels, float(len(grants))))
            out[names.DEVICE_MEMORY_GRANTED].append((labels, float(sum(g.memory_mib for g in grants)) * MIB))
            out[names.DEVICE_CORES_GRANTED].append((labels, sum(g.cores for g in grants) / 100.0))


def grant_rows(handle: DeviceHandle, known: dict[str, Labels]) -> list[GrantRow]:
    identity = metadata_labels(handle)
    rows = []
    for grant in handle.grants:
        labels = (*_grant_facts(grant, known), handle.id, *identity)
        info = (*labels, grant.partition or "", "true" if grant.exclusive else "false")
        limit = (labels, float(grant.memory_mib * MIB))
        rows.append(GrantRow(grant.uuid, labels, (info, 1.0), limit, (labels, grant.cores / 100.0)))
    return rows


def _allocations(
    out: Series,
    snapshot: Snapshot,
    handles: list[DeviceHandle],
    known: dict[str, Labels],
    seen: Rows,
    keep: Rows,
) -> None:
    live: dict[tuple[str, str], GrantReading] = {}
    for region in snapshot.regions:
        for uuid, reading in region.grants.items():
            live[(region.handle_id, uuid)] = reading
    info, limit = out[names.ALLOCATION_INFO], out[names.ALLOCATION_MEMORY_LIMIT]
    cores, used = out[names.ALLOCATION_CORES_LIMIT], out[names.ALLOCATION_MEMORY_USED]
    peak, util = out[names.ALLOCATION_MEMORY_PEAK], out[names.ALLOCATION_UTILIZATION]
    procs = out[names.ALLOCATION_PROCESSES]
    for handle in handles:
        rows = seen.get(handle.id) or grant_rows(handle, known)
        keep[handle.id] = rows
        for row in rows:
            info.append(row.info)
            limit.append(row.limit)
            cores.append(row.cores)
            found = live.get((handle.id, row.uuid))
            if found is None:
                continue  # no region here (another node, isolation off) or the limiter collector is down
            labels = row.labels
            used.append((labels, found.memory_used_bytes))
            peak.append((labels, found.memory_peak_bytes))
            procs.append((labels, len([p for p in found.processes if p.alive])))
            if found.utilization_ratio is not None:
                util.append((labels, found.utilization_ratio))


def _counters(out: Series, snapshot: Snapshot) -> None:
    tally = snapshot.tally
    if tally is None:
        return  # counters come from the ledger's event log; never reset them to 0 because it was busy
    out[names.GRANTED].append(((), float(tally.by_kind.get("allocation.granted", 0))))
    out[names.RELEASED].append(((), float(tally.by_kind.get("allocation.released", 0))))
    for reclaimer, n in sorted(tally.evictions.items()):
        out[names.EVICTIONS].append(((reclaimer,), float(n)))
    for reason, n in sorted(tally.refusals.items()):
        out[names.REFUSALS].append(((reason,), float(n)))
    for uuid, n in sorted(tally.limiter_refusals.items()):
        out[names.LIMITER_REFUSALS].append(((uuid,), float(n)))
    for kind, n in sorted(tally.by_kind.items()):
        out[names.EVENTS].append(((kind,), float(n)))
