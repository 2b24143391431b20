"""Chargeback: device-hours weighted by the share granted and by what was used, from the ledger alone.

Granted time comes from the event log (``allocation.granted`` to
``allocation.released``/``evicted``, or to now while still held); each grant is
weighed by its memory share (MiB granted / device MiB) and its core share
(cores / 100), both reported, and by the larger of the two (``charged``: the
part of the device the allocation withheld from others).  Used figures come
from the observer's usage samples (memory held, and compute where the limiter
measured it), integrated only between two real observations; ``sampled_hours``
is the time they cover and ``coverage`` its share of the granted device-hours
(``--by allocation`` gives it per allocation).  A 25 %-core share is charged a
quarter of a device, not a whole one.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from hami_devices.errors import InvalidRequest
from hami_devices.ledger import EventKind, Ledger
from hami_devices.ledger.events import USAGE_BUCKET_SECONDS

GroupBy = Literal[
    "namespace", "pod", "queue", "workload", "owner", "device", "allocation", "dag", "task", "application"
]
GROUPINGS: tuple[str, ...] = (
    "namespace", "pod", "queue", "workload", "owner", "device", "allocation", "dag", "task", "application",
)
# groupings by the identity a workflow integration records: an Airflow task's DAG and task (a Spark application:
# its name where conf(application=...) gave it, else its id)
METADATA_GROUPS: dict[str, tuple[str, ...]] = {
    "dag": ("dag_id",),
    "task": ("dag_id", "task_id"),
}
HOUR = 3600.0


@dataclass
class UsageRow:
    group: str
    vendor: str
    model: str
    allocations: int = 0
    device_hours: float = 0.0
    memory_share_hours: float = 0.0
    core_share_hours: float = 0.0
    charged_share_hours: float = 0.0
    used_memory_share_hours: float = 0.0
    used_core_share_hours: float = 0.0
    sampled_hours: float = 0.0
    utilization_sampled_hours: float = 0.0
    _ids: set[str] = field(default_factory=set, repr=False)

    @property
    def coverage(self) -> float:
        """The share of the granted device-hours that usage samples cover (0..1)."""
        return min(1.0, self.sampled_hours / self.device_hours) if self.device_hours > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row.pop("_ids")
        row["coverage"] = self.coverage
        return row


@dataclass
class UsageReport:
    since: float
    until: float
    by: str
    rows: list[UsageRow]

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.since, "to": self.until, "by": self.by, "rows": [r.to_dict() for r in self.rows]}


@dataclass(frozen=True)
class _Held:
    """One allocation's life as the event log tells it."""

    allocation_id: str
    start: float
    end: float | None
    metadata: Mapping[str, str]
    request: Mapping[str, Any]
    grants: list[Mapping[str, Any]]


def group_of(by: str, held: _Held, uuid: str) -> str:
    meta, request = held.metadata, held.request
    if by == "namespace":
        return meta.get("namespace") or "(none)"
    if by == "pod":
        pod = meta.get("pod")
        return f"{meta['namespace']}/{pod}" if pod and meta.get("namespace") else pod or "(none)"
    if by == "allocation":
        return held.allocation_id
    if by == "queue":
        return meta.get("queue") or request.get("queue") or "default"
    if by == "workload":
        return meta.get("workload") or request.get("name") or held.allocation_id
    if by == "owner":
        return meta.get("owner") or "(none)"
    if by == "application":
        return meta.get("spark_app_name") or meta.get("spark_app") or "(none)"
    if by in METADATA_GROUPS:
        keys = METADATA_GROUPS[by]
        return "/".join(meta[k] for k in keys) if all(meta.get(k) for k in keys) else "(none)"
    return uuid


def _lives(ledger: Ledger, until: float) -> list[_Held]:
    with ledger.reading() as view:
        events = view.events(until=until, kinds=[EventKind.GRANTED, EventKind.RELEASED, EventKind.EVICTED])
    ends = {e.allocation_id: e.time for e in events if e.kind != EventKind.GRANTED}
    return [
        _Held(
            allocation_id=e.allocation_id or "",
            start=e.time,
            end=ends.get(e.allocation_id),
            metadata=e.data.get("metadata") or {},
            request=e.data.get("request") or {},
            grants=list(e.data.get("grants") or []),
        )
        for e in events
        if e.kind == EventKind.GRANTED
    ]


def usage_report(
    ledger: Ledger, since: float, until: float, by: str, *, now: float | None = None
) -> UsageReport:
    if by not in GROUPINGS:
        raise InvalidRequest("--by", f"{by!r} is not one of {', '.join(GROUPINGS)}")
    if until <= since:
        raise InvalidRequest("--to", "the end of the period must come after its start")
    current = time.time() if now is None else now
    rows: dict[tuple[str, str, str], UsageRow] = {}
    device_memory: dict[tuple[str, str], float] = {}
    where: dict[tuple[str, str], tuple[str, str, str]] = {}

    def row_for(key: tuple[str, str, str]) -> UsageRow:
        if key not in rows:
            rows[key] = UsageRow(*key)
        return rows[key]

    for held in _lives(ledger, until):
        end = min(until, current if held.end is None else held.end)
        overlap_h = max(0.0, end - max(held.start, since)) / HOUR
        for grant in held.grants:
            uuid = str(grant.get("uuid", ""))
            key = (group_of(by, held, uuid), str(grant.get("vendor", "")), str(grant.get("model", "")))
            where[(held.allocation_id, uuid)] = key
            total = grant.get("device_memory_mib")
            if total:
                device_memory[(held.allocation_id, uuid)] = float(total)
            if overlap_h <= 0:
                continue
            row = row_for(key)
            row._ids.add(held.allocation_id)
            memory_share = float(grant.get("memory_mib", 0)) / float(total) if total else 0.0
            core_share = float(grant.get("cores", 0)) / 100.0
            row.device_hours += overlap_h
            row.memory_share_hours += overlap_h * memory_share
            row.core_share_hours += overlap_h * core_share
            row.charged_share_hours += overlap_h * max(memory_share, core_share)

    with ledger.reading() as view:
        samples = view.usage(since, until)
    for sample in samples:
        found = where.get((sample.allocation_id, sample.uuid))
        if found is None:
            continue  # an allocation whose grant event is older than the log (or was pruned)
        # Buckets cut by the period count in proportion; usage within one bucket is taken as even.
        covered = min(until, sample.bucket + USAGE_BUCKET_SECONDS) - max(since, sample.bucket)
        fraction = max(0.0, covered) / USAGE_BUCKET_SECONDS
        row = row_for(found)
        row._ids.add(sample.allocation_id)
        total = device_memory.get((sample.allocation_id, sample.uuid))
        if total:
            row.used_memory_share_hours += fraction * sample.memory_mib_seconds / total / HOUR
        row.used_core_share_hours += fraction * sample.utilization_ratio_seconds / HOUR
        row.sampled_hours += fraction * sample.seconds / HOUR
        row.utilization_sampled_hours += fraction * sample.utilization_seconds / HOUR

    for row in rows.values():
        row.allocations = len(row._ids)
    ordered = sorted(rows.values(), key=lambda r: (-r.charged_share_hours, r.group, r.vendor, r.model))
    return UsageReport(since, until, by, ordered)


def totals(report: UsageReport) -> dict[str, float]:
    summed: dict[str, float] = defaultdict(float)
    for row in report.rows:
        for key, value in row.to_dict().items():
            if isinstance(value, float):
                summed[key] += value
    return dict(summed)
