"""An in-process ledger for embedding and simulation."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from hami_devices.errors import UnknownAllocation
from hami_devices.ledger.base import Ledger, LedgerView
from hami_devices.ledger.changes import Change, follows_on, trim_below
from hami_devices.ledger.events import ENDS_ALLOCATION, LIFECYCLE, USAGE_BUCKET_SECONDS, Event, UsageSample
from hami_devices.models import DeviceHandle, Grant

_UsageKey = tuple[float, str, str]


def _prunable(event: Event, before: float, ended: set[str | None]) -> bool:
    if event.time >= before:
        return False
    return event.kind not in LIFECYCLE or event.allocation_id in ended


class _MemoryStore:
    """The committed state.  Events, observations and usage only grow or change by key, so a
    transaction keeps its writes aside and applies them on success instead of copying them."""

    def __init__(self) -> None:
        self.handles: dict[str, DeviceHandle] = {}
        self.events: list[Event] = []
        self.observations: dict[str, tuple[float, Any]] = {}
        self.usage: dict[_UsageKey, UsageSample] = {}
        self.changes: list[Change] = []  # consecutive generations, the newest last
        self.generation = 0


class _MemoryView(LedgerView):
    def __init__(self, store: _MemoryStore) -> None:
        self._store = store
        self._handles = dict(store.handles)
        self._events: list[Event] = []
        self._observations: dict[str, tuple[float, Any] | None] = {}
        self._usage: dict[_UsageKey, UsageSample] = {}
        self._dropped: set[int | None] = set()  # seqs pruned in this transaction
        self._usage_before = float("-inf")
        self._changes: list[Change] = []

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
        self._changes.append(Change(self.generation() + 1, handle.id, True))

    def remove(self, handle_id: str) -> DeviceHandle:
        try:
            handle = self._handles.pop(handle_id)
        except KeyError:
            raise UnknownAllocation(handle_id) from None
        self._changes.append(Change(self.generation() + 1, handle_id, False))
        return handle

    def generation(self) -> int:
        return self._changes[-1].generation if self._changes else self._store.generation

    def changes_since(self, generation: int) -> list[Change] | None:
        kept = self._store.changes
        oldest = kept[0].generation if kept else (self._changes[0].generation if self._changes else None)
        if not follows_on(generation, oldest, self.generation()):
            return None
        start = 0 if oldest is None else generation - oldest + 1  # the generations are consecutive
        return [*kept[start:], *self._changes[max(0, start - len(kept)):]]

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
                event.seq not in self._dropped
                and (event.seq or 0) > after_seq
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

    def prune(self, before: float) -> int:
        events = self.events()
        ended = {e.allocation_id for e in events if e.kind in ENDS_ALLOCATION and e.time < before}
        dropped = {e.seq for e in events if _prunable(e, before, ended)}
        self._dropped |= dropped
        self._usage_before = max(self._usage_before, before)
        return len(dropped)

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
        since = max(since, self._usage_before)
        return sorted(
            (s for s in merged.values() if s.bucket < until and s.bucket + USAGE_BUCKET_SECONDS > since),
            key=lambda s: (s.bucket, s.allocation_id, s.uuid),
        )

    def commit(self) -> None:
        store = self._store
        store.handles = self._handles
        if self._changes:
            before, store.generation = store.generation, self._changes[-1].generation
            store.changes.extend(self._changes)
            below = trim_below(before, store.generation)
            if below is not None:
                del store.changes[: max(0, below - store.changes[0].generation + 1)]
        store.events.extend(self._events)
        if self._dropped:
            store.events = [e for e in store.events if e.seq not in self._dropped]
        for key, value in self._observations.items():
            if value is None:
                store.observations.pop(key, None)
            else:
                store.observations[key] = value
        for usage_key, sample in self._usage.items():
            previous = store.usage.get(usage_key)
            store.usage[usage_key] = sample if previous is None else previous.plus(sample)
        if self._usage_before > float("-inf"):
            cut = self._usage_before
            store.usage = {k: v for k, v in store.usage.items() if v.bucket + USAGE_BUCKET_SECONDS > cut}


class MemoryLedger(Ledger):
    """The in-memory ledger, for embedding and simulation: gone with the process.

    Thread-safe; a transaction's writes replace or extend the state only on success.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._store = _MemoryStore()

    @contextmanager
    def transaction(self) -> Iterator[LedgerView]:
        with self._lock:
            view = _MemoryView(self._store)
            yield view
            view.commit()
