"""An in-process ledger for embedding and simulation."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from hami_devices.errors import UnknownAllocation
from hami_devices.ledger.base import Ledger, LedgerView
from hami_devices.models import DeviceHandle, Grant


class _MemoryView(LedgerView):
    def __init__(self, handles: dict[str, DeviceHandle]) -> None:
        self._handles = handles

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


class MemoryLedger(Ledger):
    """Thread-safe; a transaction works on a copy that replaces the state only on success."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._handles: dict[str, DeviceHandle] = {}

    @contextmanager
    def transaction(self) -> Iterator[LedgerView]:
        with self._lock:
            working = dict(self._handles)
            yield _MemoryView(working)
            self._handles = working
