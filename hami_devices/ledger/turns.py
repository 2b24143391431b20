"""Writers of one SQLite ledger take turns on a lock file beside it before taking SQLite's write lock.

SQLite's own busy handler sleeps in growing steps (up to 100 ms) while another writer holds the
lock, so with a few writers a commit can wait far longer than the commits ahead of it took; a
waiter here retries within a millisecond.  The lock goes with the process that holds it, killed or
not.  Each thread has its own descriptor of the file, so threads of one process take turns too.
Where the lock file cannot be made, SQLite's lock alone serialises.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hami_devices.errors import LedgerUnavailable

LONGEST_PAUSE_S = 0.001
"""The longest a waiter sleeps between two tries."""


class WriterTurns:
    """``<ledger>.lock``: one writer at a time, waiting at most ``timeout_s`` for its turn."""

    def __init__(self, ledger: Path, timeout_s: float) -> None:
        self.path = Path(f"{ledger}.lock")
        self.ledger = ledger
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._fds: list[int] = []

    @contextmanager
    def turn(self) -> Iterator[None]:
        fd = self._fd()
        if fd is None:
            yield
            return
        deadline = time.monotonic() + self.timeout_s
        pause = 0.0001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LedgerUnavailable(
                        f"ledger {self.ledger} is locked by another process (waited {self.timeout_s:g} s; "
                        "HAMI_LEDGER_TIMEOUT sets the wait)"
                    ) from None
                time.sleep(pause)
                pause = min(2 * pause, LONGEST_PAUSE_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _fd(self) -> int | None:
        """This thread's own descriptor of the lock file (a lock held through another thread's one excludes it)."""
        fd: int | None = getattr(self._local, "fd", None)
        if fd is None and not getattr(self._local, "unavailable", False):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                self._local.unavailable = True
                return None
            self._local.fd = fd
            with self._lock:
                self._fds.append(fd)
        return fd

    def close(self) -> None:
        with self._lock:
            for fd in self._fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds.clear()
        self._local = threading.local()
