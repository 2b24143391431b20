"""A request's time limit, and a bind's point of no return."""

from __future__ import annotations

import threading
import time


class Deadline:
    """A request's time limit, and the bind's point of no return.

    ``claim`` (the worker, just before the API write) and ``expire`` (the HTTP side,
    when time is up) race under a lock: exactly one wins.  A bind that loses
    releases its allocation and writes nothing; once claimed, the HTTP side waits
    for the outcome instead of answering "timed out" for a bind that happened.
    """

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._state = "open"

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def claim(self) -> bool:
        with self._lock:
            if self._state == "expired" or time.monotonic() > self.at:
                self._state = "expired"
                return False
            self._state = "claimed"
            return True

    def expire(self) -> bool:
        with self._lock:
            if self._state == "claimed":
                return False
            self._state = "expired"
            return True
