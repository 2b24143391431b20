"""A loopback HTTP server with the shape of the API server's core/v1 pod endpoints that a binder uses.

It keeps pods in memory and answers as kube-apiserver does for these calls (paths, status codes,
``Status`` bodies): GET a pod, list pods (``fieldSelector`` on ``status.phase!=``), PATCH a pod
(JSON Patch needs a JSON array; merge and strategic merge patches an object; a ``metadata.uid``
that differs from the pod's is refused), and create a ``Binding`` (through
``pods/{name}/binding`` or the ``bindings`` collection): 404 for no such pod, 409 when the pod is
already bound or its UID differs.  ``fail_next`` makes the next requests answer 500.  It is a
test double of the server; the real kube-apiserver runs in ``tests/kubernetes/cluster``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)(/binding)?$")
BINDINGS = re.compile(r"^/api/v1/namespaces/([^/]+)/bindings$")


class PodApi(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, str]] = []  # method, path, content type
        self.fail_next = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def add(self, name: str, uid: str, namespace: str = "default", phase: str = "Pending") -> dict[str, Any]:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": {}},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": {"phase": phase}}
        self.pods[(namespace, name)] = pod
        return pod

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": "test-token"}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        }))
        return path


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "message": message, "reason": reason,
            "code": code}


class _Handler(BaseHTTPRequestHandler):
    server: PodApi

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        payload = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        kind = self.headers.get("Content-Type", "")
        body = self._body() if method in ("POST", "PATCH") else None
        with self.server.lock:
            self.server.requests.append((method, url.path, kind))
            if self.server.fail_next > 0:
                self.server.fail_next -= 1
                self._send(500, _status(500, "InternalError", "injected failure"))
                return
            code, answer = self._answer(method, url.path, parse_qs(url.query), kind, body)
        self._send(code, answer)

    def _answer(self, method: str, path: str, query: dict[str, list[str]], kind: str, body: Any
                ) -> tuple[int, Any]:
        pods = self.server.pods
        if method == "GET" and path == "/api/v1/pods":
            excluded = [s.split("!=", 1)[1] for f in query.get("fieldSelector", []) for s in f.split(",")
                        if s.startswith("status.phase!=")]
            items = [p for p in pods.values() if p["status"]["phase"] not in excluded]
            return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
        found = POD.match(path) or BINDINGS.match(path)
        if found is None:
            return 404, _status(404, "NotFound", f"the server could not find the requested resource {path}")
        namespace = found.group(1)
        if found.re is BINDINGS or found.group(3):
            if method != "POST":
                return 405, _status(405, "MethodNotAllowed", "the server does not allow this method")
            name = body["metadata"]["name"] if found.re is BINDINGS else found.group(2)
            return self._bind(namespace, name, body)
        pod = pods.get((namespace, found.group(2)))
        if pod is None:
            return 404, _status(404, "NotFound", f'pods "{found.group(2)}" not found')
        if method == "GET":
            return 200, pod
        if method == "PATCH":
            return self._patch(pod, kind, body)
        return 405, _status(405, "MethodNotAllowed", "the server does not allow this method")

    def _patch(self, pod: dict[str, Any], kind: str, body: Any) -> tuple[int, Any]:
        if kind.startswith("application/json-patch+json") and not isinstance(body, list):
            return 400, _status(400, "BadRequest", "json: cannot unmarshal object into Go value of type "
                                                   "jsonpatch.Patch")
        if not kind.startswith(("application/merge-patch+json", "application/strategic-merge-patch+json")):
            return 415, _status(415, "UnsupportedMediaType", f"unknown patch format: {kind}")
        meta = body.get("metadata") or {}
        if "uid" in meta and meta["uid"] != pod["metadata"]["uid"]:
            return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on pods "{pod["metadata"]["name"]}": '
                                                 f"Precondition failed: UID in precondition: {meta['uid']}, "
                                                 f"UID in object meta: {pod['metadata']['uid']}")
        pod["metadata"]["annotations"].update(meta.get("annotations") or {})
        return 200, pod

    def _bind(self, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, Any]:
        pod = self.server.pods.get((namespace, name))
        if pod is None:
            return 404, _status(404, "NotFound", f'pods "{name}" not found')
        uid = (body.get("metadata") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": '
                                                 f"Precondition failed: UID in precondition: {uid}, "
                                                 f"UID in object meta: {pod['metadata']['uid']}")
        if pod["spec"].get("nodeName"):
            return 409, _status(409, "Conflict", f"pod {name} is already assigned to node "
                                                 f'"{pod["spec"]["nodeName"]}"')
        pod["spec"]["nodeName"] = body["target"]["name"]
        return 201, _status(201, "", "") | {"status": "Success"}

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PATCH(self) -> None:
        self._route("PATCH")


@contextmanager
def running() -> Iterator[PodApi]:
    server = PodApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
