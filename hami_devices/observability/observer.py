"""Turn polled readings into lifecycle events and usage samples, each transition recorded exactly once.

What an observer saw last is kept in the ledger (``observations``), and the
events for the differences are written in the same transaction as the new
state.  Two observers (an exporter and an ``events --follow --observe``, or two
exporters) therefore never record one transition twice, and a snapshot older
than the state already recorded is not applied (it would "restart" a process
that a newer snapshot saw exit).

Polling sees what is alive at each pass: a process that starts and exits
between two passes is not seen.  A launcher that waits for its workload knows
better, and tells with ``record_process_exit`` (with the exit status).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hami_devices.ledger import Event, EventKind, Ledger, LedgerView, UsageSample
from hami_devices.ledger.events import USAGE_BUCKET_SECONDS, bucket_of
from hami_devices.models import DeviceHandle
from hami_devices.observability import procs
from hami_devices.observability.regions import GrantReading, RegionReading
from hami_devices.observability.snapshot import LIMITER, Snapshot
from hami_devices.releasing import REVOKED_FROM

log = logging.getLogger(__name__)

MIB = 1024 * 1024
PROCS = "procs/"
HEALTH = "health/"

Identity = tuple[int, int]  # (pid, start time): a reused pid is another process


def _procs_key(handle_id: str, group: str) -> str:
    return f"{PROCS}{handle_id}/{group}"


def _handle_of(key: str) -> str:
    return key[len(PROCS) :].split("/", 1)[0]


def _identities(value: Any) -> set[Identity]:
    return {(int(entry[0]), int(entry[1])) for entry in value.get("alive", [])}


def _local_pids(value: Any) -> dict[Identity, int | None]:
    """Each process last seen alive -> its pid in this machine's /proc (``None``: cannot be known)."""
    found: dict[Identity, int | None] = {}
    for entry in value.get("alive", []):
        pid, start = int(entry[0]), int(entry[1])
        host_pid, namespace = (int(entry[2]), int(entry[3])) if len(entry) >= 4 else (0, 0)
        found[(pid, start)] = procs.local_pid(pid, host_pid, namespace)
    return found


@dataclass(frozen=True)
class Level:
    """One grant's reading at one observation: what usage is integrated between."""

    memory_used_bytes: float
    utilization_ratio: float | None  # None: the limiter had not measured it

    @classmethod
    def of(cls, reading: GrantReading) -> Level:
        return cls(float(reading.memory_used_bytes), reading.utilization_ratio)

    def to_json(self) -> list[float | None]:
        return [self.memory_used_bytes, self.utilization_ratio]

    @classmethod
    def from_json(cls, value: Any) -> Level:
        return cls(float(value[0]), None if value[1] is None else float(value[1]))


def split_sample(handle_id: str, uuid: str, start: float, end: float, first: Level, last: Level) -> list[UsageSample]:
    """Usage between two real observations, ``first`` at ``start`` and ``last`` at ``end``, cut at usage-bucket
    boundaries: each figure runs linearly from one reading to the next (the trapezoid rule), so every piece
    is the exact integral of that line.  Utilization counts only where both readings measured it."""
    samples: list[UsageSample] = []
    span = end - start
    measured = first.utilization_ratio is not None and last.utilization_ratio is not None

    def at(t: float, a: float, b: float) -> float:
        return a + (b - a) * (t - start) / span

    t = start
    while t < end:
        bucket = bucket_of(t)
        stop = min(end, bucket + USAGE_BUCKET_SECONDS)
        dt = stop - t
        memory = (at(t, first.memory_used_bytes, last.memory_used_bytes)
                  + at(stop, first.memory_used_bytes, last.memory_used_bytes)) / 2
        ratio = 0.0
        if measured:
            assert first.utilization_ratio is not None and last.utilization_ratio is not None
            ratio = (at(t, first.utilization_ratio, last.utilization_ratio)
                     + at(stop, first.utilization_ratio, last.utilization_ratio)) / 2
        samples.append(
            UsageSample(
                bucket=bucket,
                allocation_id=handle_id,
                uuid=uuid,
                seconds=dt,
                memory_mib_seconds=memory / MIB * dt,
                utilization_seconds=dt if measured else 0.0,
                utilization_ratio_seconds=ratio * dt,
            )
        )
        t = stop
    return samples


class Observer:
    """Records process starts and exits, health changes and usage samples from snapshots.

    Usage is integrated only between two observations of a grant: nothing before the first one (the
    time between the grant and the first observation is not sampled, and the report's coverage says
    so), and nothing over a stretch longer than ``max_gap_s`` (the observer was not running).
    """

    def __init__(self, ledger: Ledger, *, max_gap_s: float = 120.0) -> None:
        self.ledger = ledger
        self.max_gap_s = max_gap_s

    def observe(self, snapshot: Snapshot) -> list[Event]:
        recorded: list[Event] = []
        with self.ledger.transaction() as view:
            if snapshot.handles is not None and snapshot.up(LIMITER):
                recorded += self._processes(view, snapshot)
            recorded += self._health(view, snapshot)
        return recorded

    # ---- processes and usage ----

    def _processes(self, view: LedgerView, snapshot: Snapshot) -> list[Event]:
        events: list[Event] = []
        handles = {h.id: h for h in snapshot.handles or []}
        state = view.observations(PROCS)
        samples: list[UsageSample] = []
        for region in snapshot.regions:
            handle = handles.get(region.handle_id)
            if handle is not None and REVOKED_FROM in handle.metadata:
                continue  # what a revoked allocation's processes hold: followed under that allocation's id
            key = _procs_key(region.handle_id, region.group)
            previous = state.pop(key, None)
            if previous is not None and previous[0] >= snapshot.time:
                continue  # a newer snapshot was recorded already
            events += self._process_changes(view, region, handle, previous, snapshot.time)
            refused = {uuid: dict(reading.refusals) for uuid, reading in region.grants.items()}
            events += self._refusals(view, region, handle, previous, refused, snapshot.time)
            alive = sorted({(p.pid, p.start_time, p.host_pid, p.pid_namespace) for p in region.processes if p.alive})
            levels = {uuid: Level.of(reading) for uuid, reading in region.grants.items()}
            view.set_observation(
                key,
                snapshot.time,
                {"alive": alive, "levels": {u: v.to_json() for u, v in levels.items()}, "refused": refused},
            )
            if previous is None or not 0 < snapshot.time - previous[0] <= self.max_gap_s:
                continue  # a first observation, or one after a gap: usage is integrated from here on
            before = previous[1].get("levels") or {}
            for uuid, level in levels.items():
                if uuid in before:
                    samples += split_sample(
                        region.handle_id, uuid, previous[0], snapshot.time, Level.from_json(before[uuid]), level
                    )
        view.add_usage(samples)
        live = set(view.handle_ids())
        for key, previous in state.items():
            if _handle_of(key) in live or previous[0] >= snapshot.time:
                continue  # still allocated (its region was just not readable now), or newer state exists
            events += self._released_processes(view, key, previous[1], snapshot.time)
        return events

    def _process_changes(
        self,
        view: LedgerView,
        region: RegionReading,
        handle: DeviceHandle | None,
        previous: tuple[float, Any] | None,
        now: float,
    ) -> list[Event]:
        before = _identities(previous[1]) if previous is not None else set()
        current = {(p.pid, p.start_time): p for p in region.processes}
        alive = {ident for ident, p in current.items() if p.alive}
        node = region.group.split("/", 1)[0]
        metadata = dict(handle.metadata) if handle else {}
        events = []
        for pid, start in sorted(alive - before):
            # when the process started, not when this pass saw it (clamped: clocks and boot times drift)
            started = procs.started_at(start)
            when = now if started is None else min(now, started)
            events.append(
                view.record_event(
                    Event(
                        time=when,
                        kind=EventKind.PROCESS_STARTED,
                        allocation_id=region.handle_id,
                        node=node,
                        data={"pid": pid, "start_time": start, "group": region.group, "metadata": metadata,
                              "observed_at": now},
                    )
                )
            )
        for pid, start in sorted(before - alive):
            slot = current.get((pid, start))
            data: dict[str, Any] = {"pid": pid, "start_time": start, "group": region.group, "exit_status": None}
            if slot is not None:
                data["memory_held_bytes"] = slot.memory_used_bytes  # what the read that saw it dead reclaimed
            data["metadata"] = metadata
            events.append(
                view.record_event(
                    Event(time=now, kind=EventKind.PROCESS_EXITED, allocation_id=region.handle_id, node=node,
                          data=data)
                )
            )
        return events

    def _refusals(
        self,
        view: LedgerView,
        region: RegionReading,
        handle: DeviceHandle | None,
        previous: tuple[float, Any] | None,
        refused: dict[str, dict[str, int]],
        now: float,
    ) -> list[Event]:
        """One ``limiter.refused`` event per grant and kind whose region counter moved since the last observation,
        with the refusals since then.  The counters start at 0 with the region, so a first observation
        reports everything since the grant; a counter lower than before is a region made anew."""
        before: dict[str, dict[str, int]] = (previous[1].get("refused") or {}) if previous is not None else {}
        since = previous[0] if previous is not None else (handle.created_at if handle is not None else None)
        node = region.group.split("/", 1)[0]
        events = []
        for uuid, counts in sorted(refused.items()):
            for kind, total in sorted(counts.items()):
                last = int(before.get(uuid, {}).get(kind, 0))
                count = total - last if total >= last else total
                if count <= 0:
                    continue
                data = {"count": count, "refusal": kind, "total": total,
                        "window_s": None if since is None else round(max(0.0, now - since), 3)}
                events.append(
                    view.record_event(
                        Event(time=now, kind=EventKind.LIMITER_REFUSALS, allocation_id=region.handle_id, uuid=uuid,
                              node=node, data=data)
                    )
                )
        return events

    def _released_processes(self, view: LedgerView, key: str, value: Any, now: float) -> list[Event]:
        """The allocation is gone (and its region with it): ask the kernel about the processes last seen.

        A process in another PID namespace whose host pid the limiter did not learn cannot be checked:
        it is no longer followed (and no exit is invented for it).
        """
        group = key[len(PROCS) :].split("/", 1)[1]
        events = []
        remaining = []
        for (pid, start), local in sorted(_local_pids(value).items()):
            if local is None:
                log.info("process %s of released allocation %s: cannot follow it across PID namespaces", pid, key)
                continue
            if procs.alive(local, start):
                remaining.append(next(e for e in value["alive"] if int(e[0]) == pid and int(e[1]) == start))
                continue
            events.append(
                view.record_event(
                    Event(
                        time=now,
                        kind=EventKind.PROCESS_EXITED,
                        allocation_id=_handle_of(key),
                        node=group.split("/", 1)[0],
                        data={"pid": pid, "start_time": start, "group": group, "exit_status": None,
                              "after_release": True},
                    )
                )
            )
        view.set_observation(key, now, {"alive": remaining} if remaining else None)
        return events

    # ---- health ----

    def _health(self, view: LedgerView, snapshot: Snapshot) -> list[Event]:
        state = view.observations(HEALTH)
        events = []
        for device in snapshot.devices:
            readings = snapshot.readings.get(device.uuid)
            if readings is None:
                continue  # its vendor did not answer: nothing is known, nothing changes
            key = f"{HEALTH}{device.uuid}"
            previous = state.get(key)
            if previous is not None and previous[0] >= snapshot.time:
                continue
            health = str(readings.health or device.info.health)
            before = previous[1]["health"] if previous is not None else None
            if health != before and (before is not None or health != "healthy"):
                events.append(
                    view.record_event(
                        Event(
                            time=snapshot.time,
                            kind=EventKind.HEALTH_CHANGED,
                            uuid=device.uuid,
                            node=device.info.node,
                            data={"from": before, "to": health, "vendor": device.info.vendor,
                                  "model": device.info.model},
                        )
                    )
                )
            view.set_observation(key, snapshot.time, {"health": health})
        return events


def record_process_exit(
    ledger: Ledger,
    allocation_id: str,
    pid: int,
    *,
    exit_status: int | None,
    start_time: int | None = None,
    at: float | None = None,
) -> Event:
    """A launcher that waited for its workload process records how it ended (``exit_status``: the
    process's status, negative for a signal, as ``subprocess`` reports it).

    The observer's state forgets the process in the same transaction, so the exit is recorded once.
    """
    now = time.time() if at is None else at
    with ledger.transaction() as view:
        group = None
        for key, (_, value) in view.observations(f"{PROCS}{allocation_id}/").items():
            # The launcher knows the pid its own /proc gives: the workload's, or the host's for a container.
            entries = [list(e) for e in value.get("alive", [])]
            match = [
                e for e in entries
                if pid in (int(e[0]), int(e[2]) if len(e) >= 4 else -1) and start_time in (None, int(e[1]))
            ]
            if match:
                group = key[len(PROCS) :].split("/", 1)[1]
                start_time = int(match[0][1])
                view.set_observation(key, now, {"alive": [e for e in entries if e not in match]})
        return view.record_event(
            Event(
                time=now,
                kind=EventKind.PROCESS_EXITED,
                allocation_id=allocation_id,
                node=group.split("/", 1)[0] if group else None,
                data={"pid": pid, "start_time": start_time, "group": group, "exit_status": exit_status,
                      "reported_by": "launcher"},
            )
        )


def record_limiter_refusals(
    ledger: Ledger, allocation_id: str, uuid: str, count: int, *, window_s: float, kind: str = "memory"
) -> Event:
    """A burst of ``count`` limiter refusals (``kind``: memory or compute) on one grant within ``window_s``;
    counted by ``hami_limiter_refusals_total``."""
    return ledger.record_event(
        Event(
            kind=EventKind.LIMITER_REFUSALS,
            allocation_id=allocation_id,
            uuid=uuid,
            data={"count": count, "window_s": window_s, "refusal": kind},
        )
    )


def observe_forever(
    observer: Observer, take: Callable[[], Snapshot], interval_s: float, stop: threading.Event
) -> None:
    """Observe every ``interval_s`` until ``stop`` is set; a failed pass is logged and the next one tries again."""
    while not stop.wait(interval_s):
        try:
            observer.observe(take())
        except Exception:  # a locked ledger or a vanished region must not end the observer thread
            log.exception("observation pass failed")
