"""Fixtures for the extender tests: pods in Kubernetes JSON, extenders behind a real loopback HTTP server."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

import hami_devices as hd
from hami_devices.assembly import build_engine
from hami_devices.kubernetes.extender import Extender, ExtenderServer, ServerSettings, serve
from hami_devices.testing import RecordingBinder
from tests.conftest import EXAMPLES

GOLDEN = Path(__file__).parent / "golden"
CLUSTER = EXAMPLES / "cluster.yaml"


def pod(
    name: str,
    limits: dict[str, Any] | None = None,
    *,
    annotations: dict[str, str] | None = None,
    priority: int | None = None,
    cpu: str | None = None,
    containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A v1.Pod as kube-scheduler sends it (the fields the extender reads, plus some it must ignore)."""
    resources: dict[str, Any] = {"limits": dict(limits or {})}
    if cpu:
        resources["requests"] = {"cpu": cpu, "memory": "1Gi"}
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "containers": containers or [{"name": "main", "image": "busybox", "resources": resources}],
    }
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": annotations or {}},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def gpu(count: int = 1, memory: int | None = None, cores: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"nvidia.com/gpu": str(count)}
    if memory is not None:
        out["nvidia.com/gpumem"] = str(memory)
    if cores is not None:
        out["nvidia.com/gpucores"] = str(cores)
    return out


def binding(p: dict[str, Any], node: str) -> dict[str, Any]:
    meta = p["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}


class Client:
    """One keep-alive HTTP/1.1 connection, as kube-scheduler's client keeps one."""

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)

    def post(self, verb: str, body: Any) -> tuple[int, Any]:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.conn.request("POST", f"/scheduler/{verb}", payload, {"Content-Type": "application/json"})
        response = self.conn.getresponse()
        return response.status, json.loads(response.read())

    def close(self) -> None:
        self.conn.close()


def small_inventory(path: Path, nodes: int = 2, per_node: int = 2, model: str = "T4") -> Path:
    """``nodes`` nodes of ``per_node`` cards each."""
    data = {"nodes": [{"name": f"node-{i}", "cpu_milli": 64000, "memory_mib": 262144,
                       "devices": [{"vendor": "nvidia", "model": model, "count": per_node}]} for i in range(nodes)]}
    path.write_text(yaml.safe_dump(data))
    return path


def assert_no_overcommit(inventory: Path | str, ledger: hd.Ledger) -> int:
    """Book every ledger allocation into a fresh, empty cluster: the accounting rules refuse any over-commit."""
    fresh = build_engine(inventory).cluster
    handles = ledger.handles()
    fresh.sync(handles)  # raises HamiError on the first allocation that does not fit beside the others
    return len(handles)


@pytest.fixture
def binder() -> RecordingBinder:
    return RecordingBinder()


@pytest.fixture
def extender(binder: RecordingBinder) -> Extender:
    return Extender(CLUSTER, hd.MemoryLedger(), binder)


@pytest.fixture
def server(extender: Extender) -> Iterator[ExtenderServer]:
    srv = serve(extender, ServerSettings(port=0, maintenance_s=0))
    yield srv
    srv.close()


@pytest.fixture
def client(server: ExtenderServer) -> Iterator[Client]:
    c = Client(server.url)
    yield c
    c.close()
