"""The ledger interface.

A ledger's ``transaction()`` is the unit of atomicity: allocation reads the
usage of the candidate devices and writes the new handle inside one
transaction, so two allocators (threads, or processes on the SQLite ledger)
can never both take the last free share.

The same transaction carries the lifecycle events that describe its change
(``record_event``), so events and allocations always agree, and the observer
state that makes polled transitions (process exits, health) be recorded once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from hami_devices.ledger.changes import Change
from hami_devices.ledger.events import Event, UsageSample
from hami_devices.models import DeviceHandle, Grant


class LedgerView(ABC):
    """Reads and writes inside one open transaction."""

    @abstractmethod
    def grants_on(self, uuid: str) -> list[Grant]: ...

    @abstractmethod
    def get(self, handle_id: str) -> DeviceHandle:
        """The handle, or ``UnknownAllocation``."""

    @abstractmethod
    def add(self, handle: DeviceHandle) -> None: ...

    @abstractmethod
    def remove(self, handle_id: str) -> DeviceHandle:
        """Delete and return the handle, or raise ``UnknownAllocation``."""

    @abstractmethod
    def handles(self) -> list[DeviceHandle]: ...

    @abstractmethod
    def handle_ids(self) -> list[str]:
        """Ids of the live allocations (cheap: no handle is decoded)."""

    def handle_ids_starting(self, prefix: str) -> list[str]:
        """Ids of the live allocations that start with ``prefix``, in ``handle_ids`` order (a ledger with an
        index on the ids answers without reading the others)."""
        return [i for i in self.handle_ids() if i.startswith(prefix)]

    # ---- the change log (``ledger.changes``): what a follower of the allocations reads instead of all ids ----

    def generation(self) -> int | None:
        """The generation of the newest allocation added or removed (0 before any); None where the ledger keeps
        no change log, so that its followers list every id."""
        return None

    def changes_since(self, generation: int) -> list[Change] | None:
        """Every allocation added or removed after ``generation``, oldest first; None when the log no longer
        holds them all (or never reached ``generation``), so that the follower lists every id instead."""
        return None

    # ---- lifecycle events ----

    @abstractmethod
    def record_event(self, event: Event) -> Event:
        """Append ``event``; it commits or rolls back with this transaction.  Returns it with its ``seq``."""

    @abstractmethod
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
        """Events in ``seq`` order, filtered; ``since``/``until`` bound ``time`` (inclusive, exclusive)."""

    @abstractmethod
    def last_seq(self) -> int:
        """The ``seq`` of the newest event, 0 when there is none."""

    @abstractmethod
    def prune(self, before: float) -> int:
        """Forget events and usage samples older than ``before``; returns the events removed.

        An allocation's grant event stays while any of its lifecycle events is newer (or it is
        live), so the log still replays to the live allocations and reports still find its grant.
        """

    # ---- observer state: what a poller saw last, so each transition is recorded once ----

    @abstractmethod
    def observations(self, prefix: str) -> dict[str, tuple[float, Any]]:
        """Key -> (time observed, JSON value) for every key starting with ``prefix``."""

    @abstractmethod
    def set_observation(self, key: str, observed_at: float, value: Any | None) -> None:
        """Store what was seen at ``observed_at`` (a JSON value); ``None`` forgets the key."""

    # ---- usage samples ----

    @abstractmethod
    def add_usage(self, samples: Sequence[UsageSample]) -> None:
        """Add to the per-bucket sums (samples of the same bucket, allocation and device are summed)."""

    @abstractmethod
    def usage(self, since: float, until: float) -> list[UsageSample]:
        """Summed samples of the buckets that start in ``[since - bucket width, until)``."""


class Ledger(ABC):
    """Holds the live allocations; shared by every Device of one node or simulation.

    Every grant and release is one transaction, with its lifecycle event written in it, so a crash never
    loses or invents one. ``MemoryLedger`` serves embedding and simulation; ``SqliteLedger`` (one file per
    node) and the PostgreSQL ledger (``hami_devices.ledger.open_ledger("postgresql://...")``, schedulers on
    several hosts) are durable. Pass the same ledger to ``hd.discover`` for every device of a node.
    """

    @abstractmethod
    def transaction(self) -> AbstractContextManager[LedgerView]:
        """Exclusive, atomic access: on an exception nothing written inside stays."""

    def get(self, handle_id: str) -> DeviceHandle:
        with self.transaction() as view:
            return view.get(handle_id)

    def handles(self) -> list[DeviceHandle]:
        with self.transaction() as view:
            return view.handles()

    def grants_on(self, uuid: str) -> list[Grant]:
        with self.transaction() as view:
            return view.grants_on(uuid)

    def reading(self) -> AbstractContextManager[LedgerView]:
        """A transaction for readers; a ledger may make it cheaper (SQLite: no write lock)."""
        return self.transaction()

    def record_event(self, event: Event) -> Event:
        """Record an event that describes no ledger change of its own (a refusal, an observation)."""
        with self.transaction() as view:
            return view.record_event(event)

    def events(self, **filters: Any) -> list[Event]:
        with self.reading() as view:
            return view.events(**filters)

    def handles_on(self, uuid: str) -> Iterator[DeviceHandle]:
        for handle in self.handles():
            if uuid in handle.uuids:
                yield handle

    def close(self) -> None:
        """Release resources (connections); the default has none."""
        return None
