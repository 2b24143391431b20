"""The Kubernetes side of binding, behind one small interface.

The extender commits an allocation to the ledger, then asks a ``PodBinder`` to record
it on the pod (annotations) and bind the pod to the node.  The reaper asks it where a
pod is bound and which pods still live, so an allocation whose bind never reached the
API server is released and one whose pod is gone is garbage-collected.

- ``ApiServerBinder``: the official client (in-cluster or kubeconfig): patches the
  annotations, creates the ``Binding``, reads pods.

Test doubles that record binds instead live in ``hami_devices.testing``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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


class ApiServerBinder:
    """The official Kubernetes client: annotate, then create the pod's ``Binding``.

    Needs the ``[kubernetes]`` extra and a service account allowed to get, list and patch
    pods and create ``pods/binding`` (kube-scheduler's own permissions).  It binds through
    the ``pods/{name}/binding`` subresource, as kube-scheduler does.  An answer the API
    server did not give (refused connection, timeout) is a ``BindFailed`` too.
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
        from urllib3.exceptions import HTTPError

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
            self._api.create_namespaced_pod_binding(pod.name, pod.namespace, body, _preload_content=False,
                                                    _request_timeout=self.timeout_s)
        except ApiException as exc:
            raise BindFailed(f"binding {pod.label} to {node}: {_refusal(exc)}") from None
        except (OSError, HTTPError) as exc:
            raise BindFailed(f"binding {pod.label} to {node}: no answer from the API server ({exc})") from None

    def _get(self, pod: PodRef) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            found = self._api.read_namespaced_pod(pod.name, pod.namespace, _request_timeout=self.timeout_s)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise BindFailed(f"reading {pod.label}: {_refusal(exc)}") from None
        except (OSError, HTTPError) as exc:
            raise BindFailed(f"reading {pod.label}: no answer from the API server ({exc})") from None
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


def _refusal(exc: Any) -> str:
    """``409 Conflict: pod p is already assigned to node "n"``: the status and the API's own message."""
    try:
        message = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")
