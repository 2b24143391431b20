"""The Kubernetes side of binding, behind one small interface.

The extender commits an allocation to the ledger, then asks a ``PodBinder`` to record
it on the pod (annotations) and bind the pod to the node.  The reaper asks it where a
pod is bound and which pods still live, so an allocation whose bind never reached the
API server is released and one whose pod is gone is garbage-collected.

- ``ApiServerBinder``: the official client (in-cluster or kubeconfig): patches the
  annotations, creates the ``Binding``, reads pods.
- ``RecordingBinder`` and ``FileRecordingBinder``: test doubles.  They call no API
  server; they record each call (in memory, or as JSON lines in a file that survives
  the process, for kill tests) and answer from what they recorded.  ``delay_s`` makes
  each bind as slow as a loaded API server; ``fail`` makes the next binds raise.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from hami_devices.errors import HamiError
from hami_devices.kubernetes.extender.pods import PodRef


class BindFailed(HamiError):
    """The API server refused or did not answer the binding."""


class PodBinder(Protocol):
    def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        """Annotate the pod and bind it to ``node``; raise ``BindFailed`` if either did not happen."""

    def bound_node(self, pod: PodRef) -> str | None:
        """The node this very pod (same UID) is bound to, or None (not bound, or gone)."""

    def live_pods(self) -> set[str] | None:
        """UIDs of the pods that exist and have not finished, or None when that cannot be told now."""

    def read_pod(self, pod: PodRef) -> dict[str, Any] | None:
        """The pod object (API JSON), or None: lets a restarted extender bind a pod it never filtered."""


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


class ApiServerBinder:
    """The official Kubernetes client: annotate, then create the pod's ``Binding``.

    Needs the ``[kubernetes]`` extra and a service account allowed to patch pods and
    create ``pods/binding`` (kube-scheduler's own permissions).
    """

    def __init__(self, *, kubeconfig: str | None = None, timeout_s: float = 5.0) -> None:
        from kubernetes import client, config

        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        else:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config()  # type: ignore[no-untyped-call]
        self._client = client
        self._api = client.CoreV1Api()
        self.timeout_s = timeout_s

    def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        from kubernetes.client.exceptions import ApiException

        c = self._client
        try:
            # The UID precondition makes both calls refuse a different pod that reuses the name.
            self._api.patch_namespaced_pod(
                pod.name, pod.namespace,
                {"metadata": {"uid": pod.uid, "annotations": dict(annotations)}},
                _request_timeout=self.timeout_s,
            )
            body = c.V1Binding(
                metadata=c.V1ObjectMeta(name=pod.name, namespace=pod.namespace, uid=pod.uid),
                target=c.V1ObjectReference(api_version="v1", kind="Node", name=node),
            )
            self._api.create_namespaced_binding(pod.namespace, body, _preload_content=False,
                                                _request_timeout=self.timeout_s)
        except ApiException as exc:
            raise BindFailed(f"binding {pod.label} to {node}: {exc.status} {exc.reason}") from None
        except OSError as exc:
            raise BindFailed(f"binding {pod.label} to {node}: {exc}") from None

    def _get(self, pod: PodRef) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            found = self._api.read_namespaced_pod(pod.name, pod.namespace, _request_timeout=self.timeout_s)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise BindFailed(f"reading {pod.label}: {exc.status} {exc.reason}") from None
        return found if found.metadata is not None and found.metadata.uid == pod.uid else None

    def bound_node(self, pod: PodRef) -> str | None:
        found = self._get(pod)
        return None if found is None else found.spec.node_name

    def live_pods(self) -> set[str] | None:
        try:
            pods = self._api.list_pod_for_all_namespaces(
                field_selector="status.phase!=Succeeded,status.phase!=Failed", _request_timeout=self.timeout_s
            )
        except Exception:  # the reaper retries later; never release on an unanswered question
            return None
        return {p.metadata.uid for p in pods.items if p.metadata is not None and p.metadata.uid}

    def read_pod(self, pod: PodRef) -> dict[str, Any] | None:
        found = self._get(pod)
        if found is None:
            return None
        data: dict[str, Any] = self._client.ApiClient().sanitize_for_serialization(found)  # type: ignore[no-untyped-call]
        return data
