"""One consistent look at a node: vendor readings, the ledger's allocations and events, the limiter regions.

``Sampler.snapshot()`` is what a scrape and the observer loop both call.  Each
source is a collector with its own thread and the same deadline (see
``timeouts``); a source that is down leaves its part of the snapshot empty and
says so in ``outcomes``, so callers omit those readings rather than invent them.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import wait
from dataclasses import dataclass, field
from typing import Any

from hami_devices.device import Device, DeviceReadings
from hami_devices.ledger import Event, EventKind, Ledger
from hami_devices.models import DeviceHandle
from hami_devices.observability.regions import RegionReader, RegionReading
from hami_devices.observability.timeouts import Collector, Outcome, SingleFlight, run_all

log = logging.getLogger(__name__)

LEDGER = "ledger"
LIMITER = "limiter"


@dataclass
class EventTally:
    """Running totals over the event log, for the exporter's counters; fed only events it has not seen."""

    last_seq: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)  # reason code -> refused requests carrying it
    evictions: Counter[str] = field(default_factory=Counter)  # reclaimer -> evictions
    limiter_refusals: Counter[tuple[str, str]] = field(default_factory=Counter)  # (uuid, memory|compute) -> refused

    def add(self, events: Sequence[Event]) -> None:
        for event in events:
            self.last_seq = max(self.last_seq, event.seq or 0)
            self.by_kind[event.kind] += 1
            if event.kind == EventKind.REFUSED:
                for code in event.data.get("counts", {}):
                    self.refusals[str(code)] += 1
            elif event.kind == EventKind.EVICTED:
                self.evictions[str(event.data.get("reclaimer", ""))] += 1
            elif event.kind == EventKind.LIMITER_REFUSALS:
                kind = str(event.data.get("refusal") or "memory")
                self.limiter_refusals[(event.uuid or "", kind)] += int(event.data.get("count", 0))


@dataclass(frozen=True)
class LedgerReading:
    handles: list[DeviceHandle]
    tally: EventTally


@dataclass
class Snapshot:
    time: float
    devices: list[Device]
    readings: dict[str, DeviceReadings]  # uuid -> live readings (only devices whose vendor answered)
    handles: list[DeviceHandle] | None  # None when the ledger could not be read
    regions: list[RegionReading]
    tally: EventTally | None
    outcomes: dict[str, Outcome[Any]]

    def up(self, collector: str) -> bool:
        outcome = self.outcomes.get(collector)
        return bool(outcome and outcome.up)


class _LedgerSource:
    """Decodes each handle once (handles never change after they are written) and reads only new events.

    While the ledger holds the same allocations it hands back the very same list, so the renderer and the
    region reader tell "nothing was granted or released" by identity.  Nobody mutates that list.
    """

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._handles: dict[str, DeviceHandle] = {}
        self._ids: list[str] = []
        self._list: list[DeviceHandle] = []
        self._tally = EventTally()

    def __call__(self) -> LedgerReading:
        with self._ledger.reading() as view:
            ids = view.handle_ids()
            fresh = [i for i in ids if i not in self._handles]
            decoded = {i: view.get(i) for i in fresh}
            events = view.events(after_seq=self._tally.last_seq)
        if ids != self._ids:
            self._handles = {i: self._handles.get(i) or decoded[i] for i in ids}
            self._ids, self._list = list(ids), list(self._handles.values())
        self._tally.add(events)
        snapshot_tally = EventTally(
            self._tally.last_seq,
            Counter(self._tally.by_kind),
            Counter(self._tally.refusals),
            Counter(self._tally.evictions),
            Counter(self._tally.limiter_refusals),
        )
        return LedgerReading(self._list, snapshot_tally)


def _read_vendor(devices: Sequence[Device]) -> dict[str, DeviceReadings]:
    readings: dict[str, DeviceReadings] = {}
    failures: list[str] = []
    for device in devices:
        try:
            readings[device.uuid] = device.read()
        except Exception as exc:  # one broken device must not hide its healthy siblings
            log.warning("reading %s failed: %s", device.uuid, exc)
            failures.append(f"{device.uuid}: {exc}")
    if devices and not readings:
        raise RuntimeError("; ".join(failures))
    return readings


class Sampler:
    """Takes snapshots of ``devices`` and ``ledger``; every source is bounded by ``timeout_s``."""

    def __init__(
        self, devices: Sequence[Device], ledger: Ledger, *, timeout_s: float = 5.0,
        missing: Mapping[str, str] | None = None,
    ) -> None:
        """``missing``: vendor -> why the vendor this node is expected to have cannot be used (its collector is
        reported down with that error: ``discovery.find_devices``)."""
        self.devices = list(devices)
        self.missing = dict(missing or {})
        self.ledger = ledger
        self.timeout_s = timeout_s
        by_vendor: dict[str, list[Device]] = {}
        for device in self.devices:
            by_vendor.setdefault(device.info.vendor, []).append(device)
        self.vendors = sorted(by_vendor)
        self._vendor_collectors: dict[str, Collector[Any]] = {
            vendor: Collector(vendor, lambda group=group: _read_vendor(group))  # type: ignore[misc]
            for vendor, group in by_vendor.items()
        }
        self._ledger_collector: Collector[LedgerReading] = Collector(LEDGER, _LedgerSource(ledger))
        self._regions = RegionReader()
        self._handles_for_regions: list[DeviceHandle] = []
        self._limiter_collector: Collector[list[RegionReading]] = Collector(
            LIMITER, lambda: self._regions.read(self._handles_for_regions)
        )
        self._take = SingleFlight(self._snapshot)

    def snapshot(self) -> Snapshot:
        """A fresh snapshot; concurrent callers share one."""
        return self._take()

    def _snapshot(self) -> Snapshot:
        started = time.time()
        deadline = time.monotonic() + self.timeout_s
        # The regions to read come from the ledger, so the limiter starts once the ledger has answered, and then
        # shares the vendors' deadline: a hung vendor library must not leave the limiter no time at all.
        vendors = {name: c.start() for name, c in self._vendor_collectors.items()}
        outcomes = run_all({LEDGER: self._ledger_collector}, self.timeout_s)
        ledger = outcomes[LEDGER].value
        handles = ledger.handles if ledger is not None else None
        limiter = None
        if handles is not None:
            self._handles_for_regions = handles
            limiter = self._limiter_collector.start()
        pending = [f for f in [*vendors.values(), limiter] if f is not None]
        if pending:
            wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        outcomes.update({name: self._vendor_collectors[name].outcome(f) for name, f in vendors.items()})
        outcomes.update({name: Outcome(name, False, 0.0, error=why) for name, why in self.missing.items()})
        regions: list[RegionReading] = []
        if handles is not None:
            outcomes[LIMITER] = self._limiter_collector.outcome(limiter)
            regions = outcomes[LIMITER].value or []
        else:
            outcomes[LIMITER] = Outcome(LIMITER, False, 0.0, error="the ledger could not be read")
        readings: dict[str, DeviceReadings] = {}
        for vendor in self.vendors:
            readings.update(outcomes[vendor].value or {})
        return Snapshot(
            time=started,
            devices=self.devices,
            readings=readings,
            handles=handles,
            regions=regions,
            tally=ledger.tally if ledger is not None else None,
            outcomes=outcomes,
        )

    def close(self) -> None:
        for collector in [*self._vendor_collectors.values(), self._ledger_collector, self._limiter_collector]:
            collector.close()
