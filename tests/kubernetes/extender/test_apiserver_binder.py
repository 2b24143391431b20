"""``ApiServerBinder`` (the official Python client) against a loopback server with the API server's pod and
binding endpoints (``podapi``): what it sends, and how it reads each answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_devices.kubernetes.extender import ApiServerBinder, BindFailed, PodRef
from tests.kubernetes.extender.podapi import PodApi, running


@pytest.fixture
def api() -> Iterator[PodApi]:
    with running() as server:
        yield server


@pytest.fixture
def binder(api: PodApi, tmp_path: Path) -> ApiServerBinder:
    return ApiServerBinder(kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig")), timeout_s=5)


def test_bind_annotates_then_binds(api: PodApi, binder: ApiServerBinder) -> None:
    api.add("p", "uid-p")
    ref = PodRef("default", "p", "uid-p")
    binder.bind(ref, "node-1", {"hami-devices.io/handle": "pod-uid-p"})
    pod = api.pods[("default", "p")]
    assert pod["metadata"]["annotations"] == {"hami-devices.io/handle": "pod-uid-p"}
    assert pod["spec"]["nodeName"] == "node-1"
    (patch, bind) = api.requests
    assert patch[:2] == ("PATCH", "/api/v1/namespaces/default/pods/p")
    assert patch[2].startswith(("application/strategic-merge-patch+json", "application/merge-patch+json"))
    assert bind[:2] == ("POST", "/api/v1/namespaces/default/pods/p/binding")  # as kube-scheduler binds
    assert binder.bound_node(ref) == "node-1"
    found = binder.read_pod(ref)
    assert found is not None and found["metadata"]["uid"] == "uid-p" and found["spec"]["nodeName"] == "node-1"


def test_a_pod_recreated_under_the_same_name_is_not_bound(api: PodApi, binder: ApiServerBinder) -> None:
    api.add("p", "uid-new")
    with pytest.raises(BindFailed, match="409"):
        binder.bind(PodRef("default", "p", "uid-old"), "node-1", {"a": "b"})
    pod = api.pods[("default", "p")]
    assert pod["metadata"]["annotations"] == {} and "nodeName" not in pod["spec"]
    assert binder.bound_node(PodRef("default", "p", "uid-old")) is None  # the UID decides whose binding it is
    assert binder.read_pod(PodRef("default", "p", "uid-old")) is None


def test_a_pod_bound_elsewhere_and_a_gone_pod(api: PodApi, binder: ApiServerBinder) -> None:
    api.add("p", "uid-p")["spec"]["nodeName"] = "node-2"
    with pytest.raises(BindFailed, match="409"):
        binder.bind(PodRef("default", "p", "uid-p"), "node-1", {})
    assert binder.bound_node(PodRef("default", "p", "uid-p")) == "node-2"
    with pytest.raises(BindFailed, match="404"):
        binder.bind(PodRef("default", "gone", "uid-gone"), "node-1", {})
    assert binder.bound_node(PodRef("default", "gone", "uid-gone")) is None


def test_live_pods_and_failures(api: PodApi, binder: ApiServerBinder) -> None:
    api.add("running", "uid-r", phase="Running")
    api.add("done", "uid-d", phase="Succeeded")
    api.add("failed", "uid-f", phase="Failed")
    assert binder.live_pods() == {"uid-r"}
    api.fail_next = 1
    assert binder.live_pods() is None  # unanswered: the reaper must not release anything
    api.fail_next = 1
    with pytest.raises(BindFailed, match="500"):
        binder.bind(PodRef("default", "running", "uid-r"), "node-1", {})


def test_an_unreachable_api_server_is_a_bind_failure(tmp_path: Path) -> None:
    with running() as api:
        config = api.kubeconfig(tmp_path / "kubeconfig")
    binder = ApiServerBinder(kubeconfig=str(config), timeout_s=2)
    with pytest.raises(BindFailed):
        binder.bind(PodRef("default", "p", "uid-p"), "node-1", {})
    assert binder.live_pods() is None
