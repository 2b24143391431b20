"""The exporter process: ``/metrics`` over HTTP, plus the observer loop that records transitions and samples."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from hami_devices.device import Device
from hami_devices.errors import InvalidRequest
from hami_devices.ledger import Ledger
from hami_devices.observability.collector import HamiCollector
from hami_devices.observability.observer import Observer, observe_forever
from hami_devices.observability.snapshot import Sampler

log = logging.getLogger(__name__)


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9400`` for IPv6) or ``:PORT`` (all interfaces)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidRequest("--listen", f"expected HOST:PORT, got {text!r}")
    return (host.strip("[]") or "0.0.0.0"), int(port)


@dataclass
class Exporter:
    """A running exporter; ``port`` is the bound one (useful with port 0).  ``stop()`` shuts it down."""

    sampler: Sampler
    registry: CollectorRegistry
    port: int
    _stop: threading.Event
    _threads: list[threading.Thread]
    _server: object | None

    def scrape(self) -> bytes:
        return generate_latest(self.registry)

    def request_stop(self) -> None:
        """Ask ``wait()`` to return (safe from a signal handler); ``stop()`` then shuts down."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        shutdown = getattr(self._server, "shutdown", None)
        if shutdown is not None:
            shutdown()
        for thread in self._threads:
            thread.join(timeout=5)
        self.sampler.close()

    def wait(self) -> None:
        self._stop.wait()


def build_registry(sampler: Sampler) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HamiCollector(sampler))
    return registry


def start(
    devices: Sequence[Device],
    ledger: Ledger,
    *,
    listen: str | None = "127.0.0.1:9400",
    timeout_s: float = 5.0,
    observe_interval_s: float = 15.0,
) -> Exporter:
    """Serve ``/metrics`` on ``listen`` (``None``: no server, for ``scrape()`` alone) and observe every
    ``observe_interval_s`` seconds (0: never)."""
    sampler = Sampler(devices, ledger, timeout_s=timeout_s)
    registry = build_registry(sampler)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    server = None
    port = 0
    if listen is not None:
        host, wanted = parse_listen(listen)
        server, thread = start_http_server(wanted, host, registry)
        port = int(server.server_port)
        threads.append(thread)
    if observe_interval_s > 0:
        observer = Observer(ledger, max_gap_s=max(120.0, 4 * observe_interval_s))
        try:
            observer.observe(sampler.snapshot())  # a baseline at once: the first transitions count from here
        except Exception:
            log.exception("first observation pass failed")
        loop = threading.Thread(
            target=observe_forever,
            args=(observer, sampler.snapshot, observe_interval_s, stop),
            name="hami-observer",
            daemon=True,
        )
        loop.start()
        threads.append(loop)
    return Exporter(sampler, registry, port, stop, threads, server)
