"""Allocation ledgers: where the live allocations of a node (or a simulation) are kept, with their events."""

from hami_devices.ledger.base import Ledger, LedgerView
from hami_devices.ledger.events import Event, EventKind, UsageSample
from hami_devices.ledger.memory import MemoryLedger
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
]
