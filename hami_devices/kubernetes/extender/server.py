"""The HTTP face of the extender, on the standard library's ``http.server``.

Why the standard library: the protocol is four JSON POST verbs and a health check
from one trusted client (kube-scheduler), with no routing, templating or streaming; a
threaded server with keep-alive costs a fraction of a millisecond per call, which the
engine's decision dwarfs, and adds no dependency to an SDK that is also embedded
elsewhere.  What a framework would add is done here in a few lines:

- safe by default: it listens on loopback unless told otherwise;
- a request body larger than ``max_body`` is refused (413) before it is read, and a
  body without ``Content-Length`` (411); a client that stops sending is dropped after
  ``timeout_s`` (socket timeout);
- every verb runs under a per-request deadline: past it the answer is the protocol's
  ``Error`` with 503, except for a bind already writing to the API server, whose
  outcome is awaited (see ``core.Deadline``);
- malformed JSON or input that does not validate is an error (400), anything unexpected
  too (500): never a crash.

How an error is answered follows what kube-scheduler's client (``HTTPExtender.send``)
can read: it decodes a body only on HTTP 200, and only ``ExtenderFilterResult`` and
``ExtenderBindingResult`` have an ``Error`` field.  So ``filter`` and ``bind`` answer
every error with 200 and the message in ``Error`` (kube-scheduler shows it in the pod's
events); ``prioritize`` and ``preempt``, whose results have no such field, answer with the
HTTP status and ``{"Error": ...}`` for a human reading the logs (kube-scheduler reports
only the status code).  Every error is logged here with its message.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hami_devices.errors import CannotListen, HamiError, InvalidRequest
from hami_devices.kubernetes.extender import wire
from hami_devices.kubernetes.extender.core import Extender
from hami_devices.kubernetes.extender.deadline import Deadline

log = logging.getLogger("hami_devices.extender")
VERBS = ("filter", "prioritize", "preempt", "bind")
ERROR_FIELD_VERBS = ("filter", "bind")
"""Verbs whose result type carries ``Error``: their errors are answered with 200 so the client reads them."""


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8888
    timeout_s: float = 5.0
    max_body: int = 16 * 1024 * 1024
    workers: int = 32
    maintenance_s: float = 10.0  # resync with the ledger and reap expired leases this often (0: never)


class ExtenderServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default listen backlog is 5: kube-scheduler's parallel binds (16 by default)
    # opening connections at once overflow it, and a dropped SYN is retried only after a second.
    request_queue_size = 128

    def __init__(self, extender: Extender, settings: ServerSettings) -> None:
        self.extender = extender
        self.settings = settings
        self.pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="extender")
        self._stop = threading.Event()
        try:
            super().__init__((settings.host, settings.port), _Handler)
        except OSError as exc:
            self.pool.shutdown(wait=False)
            raise CannotListen(settings.host, settings.port, exc) from None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://[{name}]:{port}" if ":" in name else f"http://{name}:{port}"

    def start(self) -> threading.Thread:
        """Serve (and keep the ledger in step) on background threads; ``close`` stops both."""
        thread = threading.Thread(target=self.serve_forever, name="extender-http", daemon=True)
        thread.start()
        if self.settings.maintenance_s > 0:
            threading.Thread(target=self._maintain, name="extender-maintenance", daemon=True).start()
        return thread

    def _maintain(self) -> None:
        while not self._stop.wait(self.settings.maintenance_s):
            try:
                self.extender.resync()
                counts = self.extender.reap()
                if any(counts.values()):
                    log.info("reaped: %s", counts)
            except Exception:  # keep serving; the next round retries
                log.exception("ledger maintenance failed")

    def close(self) -> None:
        self._stop.set()
        self.shutdown()
        self.server_close()
        self.pool.shutdown(wait=False, cancel_futures=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: kube-scheduler reuses its connections
    server: ExtenderServer

    def setup(self) -> None:
        self.connection = self.request
        self.connection.settimeout(self.server.settings.timeout_s)  # every read: a stalled client is dropped
        # Headers and body go out in two writes: without this, Nagle holds the body until the client's
        # delayed ACK of the headers, 40 ms per answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/healthz", "/readyz", "/livez"):
            self._send(200, b"ok", "text/plain")
        else:
            self._json(404, {"Error": f"no such path {self.path!r}"})

    def do_POST(self) -> None:
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if verb not in VERBS:
            self._drain_or_close()
            self._json(404, {"Error": f"unknown verb {verb!r}; this extender serves {', '.join(VERBS)}"})
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._error(verb, 411, "a Content-Length is required")
            return
        if int(length) > self.server.settings.max_body:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            self._error(verb, 413, f"request body of {length} bytes exceeds {self.server.settings.max_body}")
            return
        try:
            raw = self.rfile.read(int(length))
        except OSError:  # timed out or reset while reading: nobody to answer
            self.close_connection = True
            return
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(verb, 400, f"malformed JSON: {exc}")
            return
        status, answer = self._run(verb, body)
        if status == 200:
            self._json(200, answer)
        else:
            self._error(verb, status, answer)

    def _run(self, verb: str, body: Any) -> tuple[int, Any]:
        """(200, the verb's result) or (an error status, the error's message)."""
        extender = self.server.extender
        deadline = Deadline(self.server.settings.timeout_s)

        def work() -> Any:
            if verb == "bind":
                return extender.bind(body, deadline)
            return getattr(extender, verb)(body)

        try:
            future = self.server.pool.submit(work)
        except RuntimeError:  # shutting down
            return 503, "the extender is shutting down"
        try:
            try:
                return 200, future.result(timeout=deadline.left())
            except FutureTimeout:
                if deadline.expire():
                    return 503, f"no answer within {self.server.settings.timeout_s:g}s"
                return 200, future.result()  # a bind past its point of no return: report what happened
        except InvalidRequest as exc:
            return 400, f"{type(exc).__name__}: {exc}"
        except HamiError as exc:
            return 500, f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            log.exception("%s failed", verb)
            return 500, f"internal error: {type(exc).__name__}: {exc}"

    def _drain_or_close(self) -> None:
        length = self.headers.get("Content-Length")
        if length and length.isdigit() and int(length) <= self.server.settings.max_body:
            self.rfile.read(int(length))
        else:
            self.close_connection = True

    def _error(self, verb: str, status: int, message: str) -> None:
        log.warning("%s: %s (%d)", verb, message, status)
        if verb in ERROR_FIELD_VERBS:
            self._json(200, wire.filter_error(message) if verb == "filter" else wire.binding_result(message))
        else:
            self._json(status, {"Error": message})

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj, separators=(",", ":")).encode(), "application/json")

    def _send(self, status: int, payload: bytes, kind: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client went away
            self.close_connection = True


def serve(extender: Extender, settings: ServerSettings | None = None) -> ExtenderServer:
    """Start serving on background threads; the caller keeps the process alive and calls ``close``."""
    server = ExtenderServer(extender, settings or ServerSettings())
    server.start()
    return server
