"""Allocation ledgers: where the live allocations of a node (or a simulation) are kept, with their events.

``open_ledger(target)`` opens a SQLite file or a ``postgresql://`` database (``PostgresLedger`` in
``hami_devices.ledger.postgresql``, which needs the ``[postgresql]`` extra and is imported only then)."""

from hami_devices.ledger.base import Ledger, LedgerView
from hami_devices.ledger.events import Event, EventKind, UsageSample
from hami_devices.ledger.memory import MemoryLedger
from hami_devices.ledger.opening import open_ledger
from hami_devices.ledger.sqlite import SCHEMA_VERSION, SqliteLedger

__all__ = [
    "SCHEMA_VERSION",
    "Event",
    "EventKind",
    "Ledger",
    "LedgerView",
    "MemoryLedger",
    "SqliteLedger",
    "UsageSample",
    "open_ledger",
]
