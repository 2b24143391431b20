"""What a scrape serves: the last complete snapshot, rendered, refreshed in the background with a bounded age.

Reading the vendor libraries, the limiter regions and the ledger is most of a
scrape's cost, and a scrape that waits for it inherits every hiccup of a busy
node.  So, as the DCGM exporter does with its collection interval, the exporter
takes a snapshot every ``interval_s`` seconds on its own thread and a scrape
sends the last one's text, and its gzip made once (re-compressing only the
families that changed, see ``gzipparts``).  What it serves was taken at most
``max_age_s`` before the scrape arrived (by default the interval plus one
collection deadline, which is the longest a refresh can take): a scrape that
finds it older -- the refresher was starved or has failed -- takes a fresh
snapshot itself, or joins the one under way, which started at most one
collection earlier.  ``hami_exporter_snapshot_timestamp_seconds`` says
when the served readings were taken, and each collector's ``up`` and duration
are those of that snapshot's collection, deadline and all.

``interval_s=0`` collects on every scrape instead (concurrent scrapes share one
collection), as ``prometheus_client`` collectors do.
"""

from __future__ import annotations

import logging
import threading
import time

from hami_devices.observability.exposition import TextRenderer
from hami_devices.observability.gzipparts import GzipParts
from hami_devices.observability.snapshot import Sampler, Snapshot
from hami_devices.observability.timeouts import SingleFlight

log = logging.getLogger(__name__)


class Rendered:
    """One snapshot as served: its text, and the gzip of it made at most once."""

    def __init__(self, snapshot: Snapshot, parts: list[bytes], taken: float, compressor: GzipParts) -> None:
        self.snapshot = snapshot
        self.parts = parts
        self.body = b"".join(parts)
        self.taken = taken  # time.monotonic() when the snapshot was started: its age does not jump with the clock
        self._compressor = compressor
        self._gzip: bytes | None = None
        self._lock = threading.Lock()

    def gzipped(self) -> bytes:
        with self._lock:
            if self._gzip is None:
                self._gzip = self._compressor.compress(self.parts)  # only the families that changed
            return self._gzip


class Publisher:
    """Keeps the last complete snapshot rendered; see the module's docstring for the age bound."""

    def __init__(self, sampler: Sampler, renderer: TextRenderer, *, interval_s: float,
                 max_age_s: float | None = None) -> None:
        if interval_s < 0:
            raise ValueError("the refresh interval cannot be negative")
        self.sampler = sampler
        self.renderer = renderer
        self.interval_s = interval_s
        self.max_age_s = interval_s + sampler.timeout_s if max_age_s is None else max_age_s
        self._current: Rendered | None = None
        self._lock = threading.Lock()
        self._refresh = SingleFlight(self._take)
        self._compressor = GzipParts()

    def refresh(self) -> Rendered:
        """A fresh snapshot, rendered and published (callers that arrive meanwhile share it)."""
        return self._refresh()

    def current(self) -> Rendered:
        """What a scrape serves: the published snapshot while it is young enough, else a fresh one."""
        if self.interval_s > 0:
            published = self._current
            if published is not None and time.monotonic() - published.taken <= self.max_age_s:
                return published
        return self.refresh()

    def _take(self) -> Rendered:
        taken = time.monotonic()
        snapshot = self.sampler.snapshot()
        rendered = Rendered(snapshot, self.renderer.render_parts(snapshot), taken, self._compressor)
        with self._lock:
            if self._current is None or self._current.taken <= taken:
                self._current = rendered
        return rendered

    def run(self, stop: threading.Event) -> None:
        """Refresh whenever the published snapshot is ``interval_s`` old, until ``stop`` is set.

        A snapshot someone else took meanwhile (an observer pass, a scrape past the age bound) counts:
        the next refresh is due ``interval_s`` after the newest one.
        """
        while True:
            published = self._current
            due = 0.0 if published is None else published.taken + self.interval_s - time.monotonic()
            if stop.wait(max(0.0, due)):
                return
            if self._current is not published and self._current is not None:
                continue  # refreshed by someone else while waiting
            try:
                self.refresh().gzipped()  # Prometheus asks for gzip: compress here, not in the scrape
            except Exception:  # a failing refresh must not end the thread; scrapes then refresh themselves
                log.exception("refreshing the exporter's snapshot failed")
                if stop.wait(min(self.interval_s, 1.0)):
                    return
