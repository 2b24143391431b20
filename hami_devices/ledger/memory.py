"""An in-process ledger for embedding and simulation."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from hami_devices.errors import UnknownAllocation
from hami_devices.ledger.base import Ledger, LedgerView
from hami_devices.ledger.events import USAGE_BUCKET_SECONDS, Event, UsageSample
from hami_devices.models import DeviceHandle, Grant

_UsageKey = tuple[float, str, str]


class _MemoryStore:
    """The committed state.  Events, observations and usage only grow or change by key, so a
    transaction keeps its writes aside and applies them on success instead of copying them."""

    def __init__(self) -> None:
        self.handles: dict[str, DeviceHandle] = {}
        self.events: list[Event] = []
        self.observations: dict[str, tuple[float, Any]] = {}
        self.usage: dict[_UsageKey, UsageSample] = {}


class _MemoryView(LedgerView):
    def __init__(self, store: _MemoryStore) -> None:
        self._store = store
        self._handles = dict(store.handles)
        self._events: list[Event] = []
        self._observations: dict[str, tuple[float, Any] | None] = {}
        self._usage: dict[_UsageKey, UsageSample] = {}

    def grants_on(self, uuid: str) -> list[Grant]:
        return [g for h in self._handles.values() for g in h.grants if g.uuid == uuid]

    def get(self, handle_id: str) -> DeviceHandle:
        try:
            return self._handles[handle_id]
        except KeyError:
            raise UnknownAllocation(handle_id) from None

    def add(self, handle: DeviceHandle) -> None:
        if handle.id in self._handles:
            raise ValueError(f"handle id {handle.id} is already in the ledger")
        self._handles[handle.id] = handle

    def remove(self, handle_id: str) -> DeviceHandle:
        try:
            return self._handles.pop(handle_id)
        except KeyError:
            raise UnknownAllocation(handle_id) from None

    def handles(self) -> list[DeviceHandle]:
        return list(self._handles.values())

    def handle_ids(self) -> list[str]:
        return list(self._handles)

    def record_event(self, event: Event) -> Event:
        stored = event.model_copy(update={"seq": self.last_seq() + 1})
        self._events.append(stored)
        return stored

    def events(
        self,
        *,
        after_seq: int = 0,
        since: float | None = None,
        until: float | None = None,
        allocation_id: str | None = None,
        kinds: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        found: list[Event] = []
        for event in [*self._store.events, *self._events]:
            if (
                (event.seq or 0) > after_seq
                and (since is None or event.time >= since)
                and (until is None or event.time < until)
                and (allocation_id is None or event.allocation_id == allocation_id)
                and (kinds is None or event.kind in kinds)
            ):
                found.append(event)
                if limit is not None and len(found) >= limit:
                    break
        return found

    def last_seq(self) -> int:
        newest = self._events or self._store.events
        return (newest[-1].seq or 0) if newest else 0

    def observations(self, prefix: str) -> dict[str, tuple[float, Any]]:
        merged: dict[str, tuple[float, Any] | None] = {
            k: v for k, v in self._store.observations.items() if k.startswith(prefix)
        }
        merged.update({k: v for k, v in self._observations.items() if k.startswith(prefix)})
        return {k: v for k, v in merged.items() if v is not None}

    def set_observation(self, key: str, observed_at: float, value: Any | None) -> None:
        self._observations[key] = None if value is None else (observed_at, value)

    def add_usage(self, samples: Sequence[UsageSample]) -> None:
        for sample in samples:
            key = (sample.bucket, sample.allocation_id, sample.uuid)
            previous = self._usage.get(key)
            self._usage[key] = sample if previous is None else previous.plus(sample)

    def usage(self, since: float, until: float) -> list[UsageSample]:
        merged = dict(self._store.usage)
        for key, sample in self._usage.items():
            merged[key] = sample if key not in merged else merged[key].plus(sample)
        return sorted(
            (s for s in merged.values() if s.bucket < until and s.bucket + USAGE_BUCKET_SECONDS > since),
            key=lambda s: (s.bucket, s.allocation_id, s.uuid),
        )

    def commit(self) -> None:
        store = self._store
        store.handles = self._handles
        store.events.extend(self._events)
        for key, value in self._observations.items():
            if value is None:
                store.observations.pop(key, None)
            else:
                store.observations[key] = value
        for usage_key, sample in self._usage.items():
            previous = store.usage.get(usage_key)
            store.usage[usage_key] = sample if previous is None else previous.plus(sample)


class MemoryLedger(Ledger):
    """Thread-safe; a transaction's writes replace or extend the state only on success."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._store = _MemoryStore()

    @contextmanager
    def transaction(self) -> Iterator[LedgerView]:
        with self._lock:
            view = _MemoryView(self._store)
            yield view
            view.commit()
