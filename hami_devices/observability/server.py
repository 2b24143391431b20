"""The exporter process: ``/metrics`` over HTTP, plus the observer loop that records transitions and samples."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from hami_devices.device import Device
from hami_devices.errors import CannotListen, InvalidRequest
from hami_devices.ledger import Ledger
from hami_devices.observability.exposition import CONTENT_TYPE, TextRenderer
from hami_devices.observability.observer import Observer, observe_forever
from hami_devices.observability.publisher import Publisher
from hami_devices.observability.snapshot import Sampler, Snapshot

log = logging.getLogger(__name__)


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9400`` for IPv6) or ``:PORT`` (all interfaces)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidRequest("--listen", f"expected HOST:PORT, got {text!r}")
    return (host.strip("[]") or "0.0.0.0"), int(port)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow client never holds up shutdown


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None  # one access line per scrape would flood the exporter's log


@dataclass
class Exporter:
    """A running exporter; ``port`` is the bound one (useful with port 0).  ``stop()`` shuts it down.

    ``/metrics`` serves ``publisher.current()``: the last snapshot, refreshed in the background (see
    ``publisher`` for its age bound), or a fresh one per scrape when the refresh interval is 0.
    """

    sampler: Sampler
    publisher: Publisher
    port: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _server: WSGIServer | None = None

    @property
    def renderer(self) -> TextRenderer:
        return self.publisher.renderer

    def scrape(self) -> bytes:
        """A fresh snapshot in the text format (and the one ``/metrics`` serves from now on)."""
        return self.publisher.refresh().body

    def app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """The WSGI application: ``/metrics`` (gzip when the scraper accepts it, as Prometheus does)."""
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"only /metrics is served\n"]
        served = self.publisher.current()
        headers = [("Content-Type", CONTENT_TYPE)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = served.gzipped()
            headers.append(("Content-Encoding", "gzip"))
        else:
            body = served.body
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [body]

    def request_stop(self) -> None:
        """Ask ``wait()`` to return (safe from a signal handler); ``stop()`` then shuts down."""
        self._stop.set()

    def wait(self) -> None:
        self._stop.wait()

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self.sampler.close()


def start(
    devices: Sequence[Device],
    ledger: Ledger,
    *,
    listen: str | None = "127.0.0.1:9400",
    timeout_s: float = 5.0,
    observe_interval_s: float = 15.0,
    refresh_interval_s: float = 0.0,
    max_age_s: float | None = None,
    missing: Mapping[str, str] | None = None,
) -> Exporter:
    """Serve ``/metrics`` on ``listen`` (``None``: no server, for ``scrape()`` alone) and observe every
    ``observe_interval_s`` seconds (0: never).

    ``refresh_interval_s``: take a snapshot in the background this often and serve the last one, never older
    than ``max_age_s`` (default: the interval plus ``timeout_s``); 0 collects on every scrape.
    ``missing``: the expected vendors whose library cannot be loaded, served as collectors that are down.
    """
    sampler = Sampler(devices, ledger, timeout_s=timeout_s, missing=missing)
    publisher = Publisher(sampler, TextRenderer(), interval_s=refresh_interval_s, max_age_s=max_age_s)
    exporter = Exporter(sampler, publisher)
    if listen is not None:
        host, port = parse_listen(listen)
        server_class = _Server6 if ":" in host else _Server
        try:
            server = make_server(host, port, exporter.app, server_class=server_class, handler_class=_QuietHandler)
        except OSError as exc:
            sampler.close()
            raise CannotListen(host, port, exc) from None
        exporter._server = server
        exporter.port = int(server.server_port)
        thread = threading.Thread(target=server.serve_forever, name="hami-exporter-http", daemon=True)
        thread.start()
        exporter._threads.append(thread)
    if observe_interval_s > 0:
        observer = Observer(ledger, max_gap_s=max(120.0, 4 * observe_interval_s))

        def observed() -> Snapshot:
            return publisher.refresh().snapshot  # an observation pass also refreshes what scrapes serve

        try:
            observer.observe(observed())  # a baseline at once: transitions count from here
        except Exception:
            log.exception("first observation pass failed")
        loop = threading.Thread(
            target=observe_forever,
            args=(observer, observed, observe_interval_s, exporter._stop),
            name="hami-observer",
            daemon=True,
        )
        loop.start()
        exporter._threads.append(loop)
    if refresh_interval_s > 0:
        refresher = threading.Thread(
            target=publisher.run, args=(exporter._stop,), name="hami-exporter-refresh", daemon=True
        )
        refresher.start()
        exporter._threads.append(refresher)
    return exporter
