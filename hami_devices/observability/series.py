"""What one snapshot says, as series: (metric, label values, value), grouped by metric.

Both renderings read this: ``collector`` turns it into ``prometheus_client``
families (to embed in any registry), ``exposition`` into the text format with
label strings rendered once per series.  A reading that is not available is left
out, never exported as 0: a device whose library does not report power has no
``hami_device_power_watts`` series, and a vendor whose collector timed out has no
live readings at all (its ``hami_exporter_collector_up`` says 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hami_devices.device import Device, DeviceReadings
from hami_devices.errors import ReasonCode
from hami_devices.ledger import EventKind
from hami_devices.models import DeviceHandle, Grant, is_available
from hami_devices.observability import names
from hami_devices.observability.names import MetricName
from hami_devices.observability.regions import REFUSAL_KINDS, GrantReading, RegionReading
from hami_devices.observability.snapshot import EventTally, Snapshot

MIB = 1024 * 1024
ERROR_LABEL_CHARS = 300  # a label value, not a log: enough to name the library and the loader's complaint

Labels = tuple[str, ...]
Sample = tuple[MetricName, Labels, float]
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


def device_labels(device: Device) -> Labels:
    info = device.info
    return (info.node, info.vendor, info.model, info.uuid, str(info.index), info.pci_bus_id or "")


def known_devices(devices: list[Device]) -> dict[str, Labels]:
    return {d.uuid: device_labels(d) for d in devices}


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


# The series come in parts, each a function of one thing that changes on its own (a device's readings, the
# grants on a device, one allocation, one allocation's regions, the event tally, the collectors), so a
# renderer can keep a part's text while its input is unchanged.  ``series`` puts every part together.


def device_samples(device: Device, labels: Labels, readings: DeviceReadings | None) -> list[Sample]:
    """A device's facts and, when its vendor answered, its live readings (not-available ones left out)."""
    info = device.info
    numa = info.numa_node
    product = info.attributes.get("product_name") or info.attributes.get("chip_name") or ""
    out: list[Sample] = [
        (names.DEVICE_INFO, (*labels, "" if numa is None else str(numa), product), 1.0),
        (names.DEVICE_MEMORY_TOTAL, labels, float(info.memory_mib * MIB)),
    ]
    if readings is not None:
        if is_available(readings.memory_used_mib):
            out.append((names.DEVICE_MEMORY_USED, labels, float(readings.memory_used_mib) * MIB))
        if is_available(readings.utilization_pct):
            out.append((names.DEVICE_UTILIZATION, labels, float(readings.utilization_pct) / 100.0))
        if is_available(readings.temperature_c):
            out.append((names.DEVICE_TEMPERATURE, labels, float(readings.temperature_c)))
        if is_available(readings.power_w):
            out.append((names.DEVICE_POWER, labels, float(readings.power_w)))
        health = readings.health or device.info.health
        out.append((names.DEVICE_HEALTHY, labels, 1.0 if health == "healthy" else 0.0))
        for key, (metric, factor) in names.FIELD_METRICS.items():
            value = readings.extra.get(key)
            if is_available(value):
                out.append((metric, labels, float(value) * factor))  # type: ignore[arg-type]
    return out


def holders(handles: list[DeviceHandle]) -> dict[str, list[Grant]]:
    """Device uuid -> the grants on it."""
    found: dict[str, list[Grant]] = {}
    for handle in handles:
        for grant in handle.grants:
            found.setdefault(grant.uuid, []).append(grant)
    return found


def share_samples(labels: Labels, grants: list[Grant]) -> list[Sample]:
    """What the ledger has granted on a device (only when the ledger could be read)."""
    return [
        (names.DEVICE_SHARERS, labels, float(len(grants))),
        (names.DEVICE_MEMORY_GRANTED, labels, float(sum(g.memory_mib for g in grants)) * MIB),
        (names.DEVICE_CORES_GRANTED, labels, sum(g.cores for g in grants) / 100.0),
    ]


def grant_rows(handle: DeviceHandle, known: dict[str, Labels]) -> list[GrantRow]:
    identity = metadata_labels(handle)
    rows = []
    seen: dict[tuple[str, str], int] = {}  # (node, vendor) -> grants of that group so far: the runtime's numbering
    for grant in handle.grants:
        slot = seen.get((grant.node, grant.vendor), 0)
        seen[(grant.node, grant.vendor)] = slot + 1
        labels = (*_grant_facts(grant, known), handle.id, *identity, str(slot))
        info = (*labels, grant.partition or "", "true" if grant.exclusive else "false", grant.core_policy)
        limit = (labels, float(grant.memory_mib * MIB))
        rows.append(GrantRow(grant.uuid, labels, (info, 1.0), limit, (labels, grant.cores / 100.0)))
    return rows


def grant_samples(rows: list[GrantRow]) -> list[Sample]:
    """An allocation's static series: its identity and its limits, per grant."""
    out: list[Sample] = []
    for row in rows:
        out.append((names.ALLOCATION_INFO, *row.info))
        out.append((names.ALLOCATION_MEMORY_LIMIT, *row.limit))
        out.append((names.ALLOCATION_CORES_LIMIT, *row.cores))
    return out


def usage_samples(rows: list[GrantRow], regions: list[RegionReading]) -> list[Sample]:
    """An allocation's live series from its limiter regions; a grant with no region here has none."""
    live: dict[str, GrantReading] = {}
    for region in regions:
        live.update(region.grants)
    out: list[Sample] = []
    for row in rows:
        found = live.get(row.uuid)
        if found is None:
            continue  # no region here (another node, isolation off) or the limiter collector is down
        labels = row.labels
        out.append((names.ALLOCATION_MEMORY_USED, labels, float(found.memory_used_bytes)))
        out.append((names.ALLOCATION_MEMORY_PEAK, labels, float(found.memory_peak_bytes)))
        out.append((names.ALLOCATION_MEMORY_SPILLED, labels, float(found.memory_spilled_bytes)))
        out.append((names.ALLOCATION_PROCESSES, labels, float(len([p for p in found.processes if p.alive]))))
        if found.utilization_ratio is not None:
            out.append((names.ALLOCATION_UTILIZATION, labels, found.utilization_ratio))
    return out


def regions_by_handle(regions: list[RegionReading]) -> dict[str, list[RegionReading]]:
    found: dict[str, list[RegionReading]] = {}
    for region in regions:
        found.setdefault(region.handle_id, []).append(region)
    return found


def counter_samples(tally: EventTally | None, uuids: Iterable[str] = ()) -> list[Sample]:
    """The event log's counters.  Every label value known in advance starts at 0 (each reason code, each event
    kind, each device ``uuids`` names), so a rate over the first event is right; a reclaimer appears with its
    first eviction (``hami_lifecycle_events_total{kind="allocation.evicted"}`` counts them all from 0)."""
    if tally is None:
        return []  # counters come from the ledger's event log; never reset them to 0 because it was busy
    out: list[Sample] = [
        (names.GRANTED, (), float(tally.by_kind.get("allocation.granted", 0))),
        (names.RELEASED, (), float(tally.by_kind.get("allocation.released", 0))),
    ]
    out += [(names.EVICTIONS, (reclaimer,), float(n)) for reclaimer, n in sorted(tally.evictions.items())]
    reasons = dict.fromkeys(map(str, ReasonCode), 0) | dict(tally.refusals)
    out += [(names.REFUSALS, (reason,), float(n)) for reason, n in sorted(reasons.items())]
    limited = dict.fromkeys(((u, kind) for u in uuids for kind in REFUSAL_KINDS), 0) | dict(
        tally.limiter_refusals
    )
    out += [(names.LIMITER_REFUSALS, key, float(n)) for key, n in sorted(limited.items())]
    kinds = dict.fromkeys(map(str, EventKind), 0) | dict(tally.by_kind)
    out += [(names.EVENTS, (kind,), float(n)) for kind, n in sorted(kinds.items())]
    return out


def exporter_samples(snapshot: Snapshot) -> list[Sample]:
    """Which collectors answered, how long each took, and when the snapshot was taken."""
    out: list[Sample] = []
    for name, outcome in sorted(snapshot.outcomes.items()):
        out.append((names.COLLECTOR_UP, (name,), 1.0 if outcome.up else 0.0))
        if not outcome.up and outcome.error:
            out.append((names.COLLECTOR_ERROR, (name, outcome.error[:ERROR_LABEL_CHARS]), 1.0))
        out.append((names.COLLECTOR_SECONDS, (name,), outcome.seconds))
    out.append((names.SNAPSHOT_TIMESTAMP, (), snapshot.time))
    return out


def series(snapshot: Snapshot, seen: Rows | None = None, keep: Rows | None = None) -> Series:
    """Every series of the snapshot, in ``names.SERVED`` order (families stay contiguous).

    ``seen``: grant rows already worked out per allocation id (a handle never changes); the ones used
    now are put in ``keep``, so a caller can carry them to the next snapshot.
    """
    out: Series = {metric: [] for metric in names.SERVED}

    def put(samples: list[Sample]) -> None:
        for metric, labels, value in samples:
            out[metric].append((labels, value))

    known = known_devices(snapshot.devices)
    handles = snapshot.handles
    shares = holders(handles) if handles is not None else {}
    for device in snapshot.devices:
        labels = known[device.uuid]
        put(device_samples(device, labels, snapshot.readings.get(device.uuid)))
        if handles is not None:
            put(share_samples(labels, shares.get(device.uuid, [])))
    if handles is not None:
        seen, keep = seen or {}, {} if keep is None else keep
        regions = regions_by_handle(snapshot.regions)
        for handle in handles:
            rows = seen.get(handle.id) or grant_rows(handle, known)
            keep[handle.id] = rows
            put(grant_samples(rows))
            put(usage_samples(rows, regions.get(handle.id, [])))
    put(counter_samples(snapshot.tally, known))
    put(exporter_samples(snapshot))
    return out
