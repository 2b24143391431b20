"""The ledger interface.

A ledger's ``transaction()`` is the unit of atomicity: allocation reads the
usage of the candidate devices and writes the new handle inside one
transaction, so two allocators (threads, or processes on the SQLite ledger)
can never both take the last free share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager

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


class Ledger(ABC):
    """Holds the live allocations; shared by every Device of one node or simulation."""

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

    def handles_on(self, uuid: str) -> Iterator[DeviceHandle]:
        for handle in self.handles():
            if uuid in handle.uuids:
                yield handle

    def close(self) -> None:
        """Release resources (connections); the default has none."""
        return None
