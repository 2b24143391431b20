"""Run each collector (one per vendor library, one for the limiter regions, one for the ledger) on its own
thread with a deadline, so a slow or hung library costs a scrape at most one timeout and never the others.

A collector whose previous run is still going is not started again: a library that
hangs for good ties up one thread, not one more per scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """One collector's result for one snapshot: its value when ``up``, else why not."""

    name: str
    up: bool
    seconds: float
    value: T | None = None
    error: str | None = None


class Collector(Generic[T]):
    """A named unit of collection with its own worker thread."""

    def __init__(self, name: str, work: Callable[[], T]) -> None:
        self.name = name
        self._work = work
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"hami-collect-{name}")
        self._running: Future[tuple[T, float]] | None = None
        self._started = 0.0

    def _timed(self) -> tuple[T, float]:
        begin = time.perf_counter()
        value = self._work()
        return value, time.perf_counter() - begin

    def start(self) -> Future[tuple[T, float]] | None:
        """A fresh run, or ``None`` while the last one has not finished (its late result is dropped)."""
        if self._running is not None and not self._running.done():
            return None
        self._started = time.perf_counter()
        self._running = self._pool.submit(self._timed)
        return self._running

    def outcome(self, future: Future[tuple[T, float]] | None) -> Outcome[T]:
        if future is None:
            busy = time.perf_counter() - self._started
            return Outcome(self.name, False, busy, error=f"previous collection still running after {busy:.1f}s")
        if not future.done():
            return Outcome(self.name, False, time.perf_counter() - self._started, error="timed out")
        error = future.exception()
        if error is not None:
            log.warning("collector %s failed: %s", self.name, error)
            elapsed = time.perf_counter() - self._started
            return Outcome(self.name, False, elapsed, error=f"{type(error).__name__}: {error}")
        value, seconds = future.result()
        return Outcome(self.name, True, seconds, value=value)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def run_all(collectors: Mapping[str, Collector[Any]], timeout_s: float) -> dict[str, Outcome[Any]]:
    """Start every collector, wait for them together until ``timeout_s``, and report each."""
    futures = {name: c.start() for name, c in collectors.items()}
    pending = [f for f in futures.values() if f is not None]
    if pending:
        wait(pending, timeout=timeout_s)
    return {name: collectors[name].outcome(future) for name, future in futures.items()}


class SingleFlight(Generic[T]):
    """Callers that arrive while a call is running share its result instead of starting another."""

    def __init__(self, call: Callable[[], T]) -> None:
        self._call = call
        self._lock = threading.Lock()
        self._inflight: Future[T] | None = None

    def __call__(self) -> T:
        with self._lock:
            shared = self._inflight
            if shared is None:
                mine: Future[T] = Future()
                self._inflight = mine
        if shared is not None:
            return shared.result()
        try:
            value = self._call()
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        else:
            mine.set_result(value)
            return value
        finally:
            with self._lock:
                self._inflight = None
