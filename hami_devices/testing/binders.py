"""Test doubles of ``PodBinder`` (``hami_devices.kubernetes.extender.kube``): no API server is called.

Not for production: they stand in for the API server in tests, benchmarks and the
extender's ``--binder record:FILE`` mode.  Each records every bind (in memory, or as
JSON lines in a file that survives the process, for kill tests) and answers
``bound_node`` and ``live_pods`` from what it recorded.  ``delay_s`` makes each bind as
slow as a loaded API server; ``RecordingBinder.fail`` makes the next binds raise.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hami_devices.kubernetes.extender.kube import BindFailed
from hami_devices.kubernetes.extender.pods import PodRef


class RecordingBinder:
    """Test double: records binds in memory; no API server is involved."""

    def __init__(self, *, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls: list[dict[str, Any]] = []
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod object, for read_pod
        self.finished: set[str] = set()
        self.fail = 0  # the next ``fail`` binds raise BindFailed
        self._lock = threading.Lock()

    def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        with self._lock:
            if self.fail > 0:
                self.fail -= 1
                raise BindFailed(f"binding {pod.label} to {node}: refused (test double)")
            self.calls.append({"uid": pod.uid, "namespace": pod.namespace, "name": pod.name, "node": node,
                               "annotations": dict(annotations)})

    def bound_node(self, pod: PodRef) -> str | None:
        with self._lock:
            found = [c["node"] for c in self.calls if c["uid"] == pod.uid]
        return found[-1] if found and pod.uid not in self.finished else None

    def live_pods(self) -> set[str] | None:
        with self._lock:
            return {c["uid"] for c in self.calls} - self.finished

    def read_pod(self, pod: PodRef) -> dict[str, Any] | None:
        return self.pods.get(pod.uid)


class FileRecordingBinder:
    """Test double: appends each bind as one JSON line (flushed and fsynced) to ``path``.

    Survives the process, so a test can kill the extender mid-bind and check, after a
    restart, which binds "reached the API server".  A line cut short by the kill is
    ignored, as a request the server never finished reading would be.  Lines
    ``{"finished": UID}`` written by a test mark pods that have ended.
    """

    def __init__(self, path: str | Path, *, delay_s: float = 0.0) -> None:
        self.path = Path(path)
        self.delay_s = delay_s
        self._lock = threading.Lock()

    def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        line = json.dumps({"uid": pod.uid, "namespace": pod.namespace, "name": pod.name, "node": node,
                           "annotations": dict(annotations)})
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (line + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def bound_node(self, pod: PodRef) -> str | None:
        records = self.records()
        if any(r.get("finished") == pod.uid for r in records):
            return None
        found = [r["node"] for r in records if r.get("uid") == pod.uid]
        return found[-1] if found else None

    def live_pods(self) -> set[str] | None:
        records = self.records()
        return {r["uid"] for r in records if "uid" in r} - {r["finished"] for r in records if "finished" in r}

    def read_pod(self, pod: PodRef) -> dict[str, Any] | None:
        return None
