"""Allocation ledgers: where the live allocations of a node (or a simulation) are kept."""

from hami_devices.ledger.base import Ledger, LedgerView
from hami_devices.ledger.memory import MemoryLedger
from hami_devices.ledger.sqlite import SqliteLedger

__all__ = ["Ledger", "LedgerView", "MemoryLedger", "SqliteLedger"]
