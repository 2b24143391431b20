"""The Prometheus text format (0.0.4) of a snapshot's series, re-rendering only what changed.

At 640 allocations a scrape holds ~4,300 series of 13 labels; ``prometheus_client``
escapes and validates every label of every sample on every scrape (~130 ms on
this machine, measured by bench/exporter.py).  Most of a scrape is the same from
one snapshot to the next: an allocation's identity and limits never change, and
an idle allocation's region reads the same.  So, as kube-state-metrics does, the
text is kept in parts (one per device, one per allocation for its limits and one
for its usage, see ``series``): a part is rendered again only when its input
changed (a device's readings, the ledger's allocations, an allocation's region
readings -- the region reader hands back the same object for an unchanged region),
and a family's block is joined again only when one of its parts was.  Values use
``prometheus_client``'s own float formatting, and a test parses this output and
``prometheus_client``'s for the same snapshot and requires the same samples.
Labels with an empty value are left out: in Prometheus an empty label is no label.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client.utils import floatToGoString

from hami_devices.device import Device
from hami_devices.models import DeviceHandle, Grant
from hami_devices.observability import names
from hami_devices.observability.names import MetricName
from hami_devices.observability.regions import RegionReading
from hami_devices.observability.series import (
    GrantRow,
    Labels,
    Sample,
    counter_samples,
    device_samples,
    exporter_samples,
    grant_rows,
    grant_samples,
    holders,
    known_devices,
    regions_by_handle,
    share_samples,
    usage_samples,
)
from hami_devices.observability.snapshot import Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Text = dict[str, str]  # metric name -> its lines (one part's, or one group of parts')

_GRANT_FAMILIES = (names.ALLOCATION_INFO, names.ALLOCATION_MEMORY_LIMIT, names.ALLOCATION_CORES_LIMIT)
# The device and allocation families come first; the counters and the exporter's own series (rendered
# every time: a few lines) last.
_HEAD = names.SERVED[: names.SERVED.index(names.GRANTED)]
_TAIL = names.SERVED[names.SERVED.index(names.GRANTED) :]
_USAGE_FAMILIES = (
    names.ALLOCATION_MEMORY_USED, names.ALLOCATION_MEMORY_PEAK, names.ALLOCATION_MEMORY_SPILLED,
    names.ALLOCATION_UTILIZATION, names.ALLOCATION_PROCESSES,
)


_formatted: dict[float, str] = {}


def _format(value: float) -> str:
    # Limits, totals, 0 and 1 recur across thousands of series: format each value once.
    text = _formatted.get(value)
    if text is None:
        if len(_formatted) >= 65536:
            _formatted.clear()
        text = _formatted[value] = str(floatToGoString(value))  # type: ignore[no-untyped-call]
    return text


def _escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def label_string(names: tuple[str, ...], values: Labels) -> str:
    pairs = [f'{n}="{_escape_value(v)}"' for n, v in zip(names, values, strict=True) if v != ""]
    return "{" + ",".join(pairs) + "}" if pairs else ""


def header(metric: MetricName) -> str:
    kind = "gauge" if metric.kind == "info" else metric.kind
    return f"# HELP {metric.name} {_escape_help(metric.help)}\n# TYPE {metric.name} {kind}\n"


def _lines(samples: Iterable[Sample], labels: dict[Labels, str] | None = None) -> Text:
    """Samples as text lines, grouped by metric; ``labels``: label strings already rendered."""
    text: Text = {}
    for metric, values, value in samples:
        rendered = labels.get(values) if labels is not None else None
        if rendered is None:
            rendered = label_string(metric.labels, values)
        name = metric.name
        text[name] = text.get(name, "") + name + rendered + " " + _format(value) + "\n"
    return text


def _joined(parts: Iterable[Text], families: Iterable[MetricName]) -> Text:
    chosen = list(parts)
    return {m.name: "".join(part.get(m.name, "") for part in chosen) for m in families}


class _Allocation:
    """One allocation's rendered parts: its limits (fixed for its life) and its usage (while its regions read
    the same)."""

    def __init__(self, handle: DeviceHandle, known: dict[str, Labels]) -> None:
        self.id = handle.id
        self.rows: list[GrantRow] = grant_rows(handle, known)
        self.labels = {
            row.labels: label_string(names.ALLOCATION_LABELS, row.labels) for row in self.rows
        }  # shared by every per-allocation series but the info one
        self.grants = _lines(grant_samples(self.rows), self.labels)
        self.regions: list[RegionReading] | None = None
        self.usage: Text = {}

    def update(self, regions: list[RegionReading]) -> bool:
        """Renders the usage part again if its regions read differently; True when it did."""
        if regions == self.regions:  # identity first: an unchanged region is the same object
            return False
        self.regions = regions
        self.usage = _lines(usage_samples(self.rows, regions), self.labels)
        return True


class TextRenderer:
    """Renders snapshots; keeps each part's text while its input is unchanged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._headers = {m.name: header(m) for m in names.SERVED}
        self._devices_of: list[Device] | None = None
        self._known: dict[str, Labels] = {}
        self._device_parts: dict[str, tuple[list[Sample], Text]] = {}
        self._device_text: Text = {}
        self._handles: list[DeviceHandle] | None = None  # the list the allocation parts were built from
        self._shares: dict[str, list[Grant]] = {}
        self._allocations: list[_Allocation] = []
        self._grant_text: Text = {}
        self._usage_text: Text = {}
        # The device and allocation families' blocks (text, and its bytes: the same object while unchanged)
        self._blocks: list[tuple[str, bytes]] | None = None

    def render(self, snapshot: Snapshot) -> bytes:
        return b"".join(self.render_parts(snapshot))

    def render_parts(self, snapshot: Snapshot) -> list[bytes]:
        """The text in parts: one per device or allocation family (the very same bytes object as last time
        when the family did not change), then the counters and the exporter's own series."""
        with self._lock:
            if snapshot.devices is not self._devices_of:
                self._devices_of = snapshot.devices
                self._known = known_devices(snapshot.devices)  # grants' device labels come from these too
                self._device_parts, self._handles, self._allocations = {}, None, []
            handles = snapshot.handles
            changed = self._update_allocations(handles, snapshot.regions)
            changed = self._update_devices(snapshot) or changed
            if changed or self._blocks is None:
                groups = (self._device_text, self._grant_text, self._usage_text)
                was = self._blocks or [("", b"")] * len(_HEAD)
                blocks = []
                for metric, before in zip(_HEAD, was, strict=True):
                    text = self._headers[metric.name] + "".join(g.get(metric.name, "") for g in groups)
                    blocks.append(before if text == before[0] else (text, text.encode()))
                self._blocks = blocks
            tail = _lines([*counter_samples(snapshot.tally, self._known), *exporter_samples(snapshot)])
            rest = "".join(self._headers[m.name] + tail.get(m.name, "") for m in _TAIL).encode()
            return [*(block for _, block in self._blocks), rest]

    def _update_devices(self, snapshot: Snapshot) -> bool:
        handles = snapshot.handles
        parts: dict[str, tuple[list[Sample], Text]] = {}
        changed = len(self._device_parts) != len(snapshot.devices)
        for device in snapshot.devices:
            labels = self._known[device.uuid]
            samples = device_samples(device, labels, snapshot.readings.get(device.uuid))
            if handles is not None:
                samples += share_samples(labels, self._shares.get(device.uuid, []))
            kept = self._device_parts.get(device.uuid)
            if kept is None or kept[0] != samples:
                kept = (samples, _lines(samples))
                changed = True
            parts[device.uuid] = kept
        self._device_parts = parts
        if changed:
            self._device_text = _joined((text for _, text in parts.values()), names.SERVED)
        return changed

    def _update_allocations(self, handles: list[DeviceHandle] | None, regions: list[RegionReading]) -> bool:
        if handles is None:  # the ledger could not be read: no allocation series this time
            changed = self._handles is not None or bool(self._grant_text)
            self._handles, self._allocations, self._grant_text, self._usage_text = None, [], {}, {}
            return changed
        changed = handles is not self._handles
        if changed:
            by_id = {a.id: a for a in self._allocations}
            self._allocations = [by_id.get(h.id) or _Allocation(h, self._known) for h in handles]
            self._handles = handles
            self._shares = holders(handles)
            self._grant_text = _joined((a.grants for a in self._allocations), _GRANT_FAMILIES)
        of = regions_by_handle(regions)
        moved = False
        for handle, allocation in zip(handles, self._allocations, strict=True):
            moved = allocation.update(of.get(handle.id, [])) or moved
        if moved or changed:
            self._usage_text = _joined((a.usage for a in self._allocations), _USAGE_FAMILIES)
        return changed or moved
