"""Against a real control plane (Kubernetes 1.34.4: etcd, kube-apiserver, kube-scheduler; see controlplane.py).

- Our extender, registered through the example KubeSchedulerConfiguration: a pod created through the
  API is filtered, prioritized and bound through it, and ``ApiServerBinder`` binds it (the API server
  shows the node and our annotations; the extender's ledger holds the grant).
- Our DRA objects: ``hami-devices dra publish``'s DeviceClasses and ResourceSlices are accepted by the API
  server, kube-scheduler's DRA plugin allocates a pod's ResourceClaim on them, and our kubelet plugin
  prepares that allocation, reading the claim from the API server (the kubelet's own client code calls it).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import hami_devices as hd
from hami_devices.config import HamiConfig
from hami_devices.kubernetes.dra.publish import publish_inventory
from tests.conftest import EXAMPLES
from tests.kubernetes.cluster.controlplane import ControlPlane, binaries, wait_for
from tests.kubernetes.kubelet.harness import KubeletDriver, PluginProcess, build_driver

pytestmark = pytest.mark.kubernetes_cluster

HERE = Path(__file__).resolve().parent
INVENTORY = HERE / "inventory.yaml"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _node(name: str) -> dict[str, Any]:
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Test",
                                       "lastHeartbeatTime": None, "lastTransitionTime": None}]}}


class Cluster:
    """The control plane, our extender beside it, three Nodes; ``close`` stops whatever was started."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.control = ControlPlane(root, {})
        self.extender: subprocess.Popen[bytes] | None = None
        self.extender_ledger = root / "extender.db"
        self.extender_url = ""

    def start(self) -> None:
        self.control.bins = binaries()
        self.control.start_etcd_and_apiserver()
        with open(self.root / "extender.log", "ab") as log:
            self.extender = subprocess.Popen(
                [sys.executable, "-m", "hami_devices.cli.main", "extender", "--inventory", str(INVENTORY),
                 "--ledger", str(self.extender_ledger), "--listen", "127.0.0.1:0", "--kubeconfig",
                 str(self.control.kubeconfig), "--json", "--maintenance", "0"],
                stdout=subprocess.PIPE, stderr=log,
            )
        assert self.extender.stdout is not None
        self.extender_url = json.loads(self.extender.stdout.readline())["url"]
        config = yaml.safe_load((EXAMPLES / "extender" / "kube-scheduler-config.yaml").read_text())
        [extender] = config["extenders"]
        extender["urlPrefix"] = self.extender_url.rstrip("/") + "/scheduler"
        for name in ("gpu-a", "gpu-b", "dra-1"):
            self.control.create(_node(name))
            # admission taints a new node not-ready; with no node-lifecycle controller here, lift it as it would
            self.control.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}},
                                 content_type="application/merge-patch+json")
        self.control.start_scheduler(config)

    def pod(self, namespace: str, name: str) -> Any:
        return self.control.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")

    def close(self) -> None:
        self.control.stop()
        if self.extender is not None:
            self.extender.terminate()
            self.extender.wait(timeout=20)
            if self.extender.stdout is not None:
                self.extender.stdout.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="hc-"))
    c = Cluster(root)
    try:
        c.start()
        yield c
    finally:
        c.close()
        shutil.rmtree(root, ignore_errors=True)


def _bound(cluster: Cluster, namespace: str, name: str, timeout_s: float = 90) -> Any:
    def check() -> Any:
        pod = cluster.pod(namespace, name)
        return pod if pod["spec"].get("nodeName") else None

    try:
        return wait_for(check, timeout_s, f"pod {namespace}/{name} to be bound")
    except AssertionError:
        raise AssertionError(f"{cluster.pod(namespace, name).get('status')}\nscheduler:\n"
                             f"{cluster.control.log_tail('kube-scheduler')}") from None


# kube-scheduler sends a pod's quantities in canonical form: 3072 stays "3072", 4000 goes as "4k"; the extender
# reads gpumem as a count of MiB whatever its suffix, so both are granted as asked.
@pytest.mark.parametrize("memory_mib", ["3072", "4000"])
def test_pod_is_placed_by_the_extender_and_bound_by_apiserverbinder(cluster: Cluster, memory_mib: str) -> None:
    name = f"share-{memory_mib}"
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/none", "resources": {
            "requests": {"cpu": "1"},
            "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": memory_mib, "nvidia.com/gpucores": "30"},
        }}]},
    }
    cluster.control.create(pod)
    bound = _bound(cluster, "default", name)
    node = bound["spec"]["nodeName"]
    assert node in ("gpu-a", "gpu-b", "dra-1")
    annotations = bound["metadata"]["annotations"]
    assert annotations["hami-devices.io/node"] == node
    [grant] = json.loads(annotations["hami-devices.io/grants"])
    [handle] = [h for h in hd.SqliteLedger(cluster.extender_ledger).handles()
                if h.id == annotations["hami-devices.io/handle"]]
    assert [(g.node, g.memory_mib, g.cores) for g in handle.grants] == [(node, int(memory_mib), 30)]
    assert grant["uuid"] == handle.grants[0].uuid


def test_dra_claim_allocated_by_kube_scheduler_on_our_slices_and_prepared_by_our_plugin(cluster: Cluster) -> None:
    # the control plane runs Kubernetes 1.34, whose slices keep a card's counters with its devices
    published = publish_inventory(INVENTORY, HamiConfig(), node="dra-1", kubernetes="1.34")
    for obj in published:
        created = cluster.control.create(copy.deepcopy(obj))  # the API server validates every object
        assert created["metadata"]["name"] == obj["metadata"]["name"]
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "mixed", "namespace": "default"},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.hami-devices.io",
                                        "capacity": {"requests": {"memory": "4Gi", "cores": "30"}}}},
            {"name": "npu", "exactly": {"deviceClassName": "npu.hami-devices.io"}},
            {"name": "mlu", "exactly": {"deviceClassName": "mlu.hami-devices.io",
                                        "capacity": {"requests": {"memory": "8Gi", "cores": "50"}}}},
        ]}},
    }
    created = cluster.control.create(claim)
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dra-user", "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "image": "registry.invalid/none",
                            "resources": {"claims": [{"name": "devices"}]}}],
            "resourceClaims": [{"name": "devices", "resourceClaimName": "mixed"}],
        },
    }
    cluster.control.create(pod)
    bound = _bound(cluster, "default", "dra-user")
    assert bound["spec"]["nodeName"] == "dra-1"
    allocated = cluster.control.get(created)
    allocation = allocated["status"]["allocation"]
    results = {r["request"]: r for r in allocation["devices"]["results"]}
    assert set(results) == {"gpu", "npu", "mlu"}
    assert all(r["driver"] == "hami-devices.io" and r["pool"] == "dra-1" for r in results.values())
    assert results["gpu"]["device"].startswith("gpu-") and results["npu"]["device"].startswith("npu-")
    assert results["mlu"]["device"].startswith("mlu-")
    assert results["gpu"]["consumedCapacity"] == {"memory": "4Gi", "cores": "30"}
    assert UUID.match(results["gpu"]["shareID"])
    assert allocated["status"]["reservedFor"][0]["name"] == "dra-user"

    # the kubelet on dra-1 would now call our plugin: do exactly that, the plugin reading the claim from the API
    root = Path(tempfile.mkdtemp(prefix="hp-"))
    plugin = PluginProcess(root, INVENTORY, "dra-1", kubeconfig=cluster.control.kubeconfig)
    kubelet = None
    try:
        plugin.start()
        kubelet = KubeletDriver(build_driver(), plugin.registry, root / "kubelet.log")
        assert "error" not in kubelet.call(op="wait_registered", timeout_s=30)
        ref = {"namespace": "default", "name": "mixed", "uid": allocated["metadata"]["uid"]}
        answer = kubelet.call(op="prepare", claims=[ref])
        per_claim = answer["response"]["claims"][ref["uid"]]
        assert not per_claim.get("error"), per_claim
        assert sorted(d["device_name"] for d in per_claim["devices"]) == sorted(r["device"] for r in results.values())
        [handle] = hd.SqliteLedger(plugin.ledger).handles()
        by_vendor = {g.vendor: g for g in handle.grants}
        assert (by_vendor["nvidia"].memory_mib, by_vendor["nvidia"].cores) == (4096, 30)
        assert (by_vendor["cambricon"].memory_mib, by_vendor["cambricon"].cores) == (8192, 50)
        assert by_vendor["ascend"].cores == 100  # no capacity request: the whole card
        done = kubelet.call(op="unprepare", claims=[ref])
        assert not done["response"]["claims"][ref["uid"]].get("error")
        assert hd.SqliteLedger(plugin.ledger).handles() == []
    finally:
        if kubelet is not None:
            kubelet.close()
        plugin.close()
        shutil.rmtree(root, ignore_errors=True)


def test_the_example_kubelet_plugin_manifests_are_accepted(cluster: Cluster) -> None:
    objects = list(yaml.safe_load_all((EXAMPLES / "dra" / "kubelet-plugin.yaml").read_text()))
    assert [o["kind"] for o in objects] == ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                            "DaemonSet"]
    for obj in objects:
        created = cluster.control.create(obj)
        assert created["metadata"]["uid"]
    daemonset = cluster.control.get(objects[-1])
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["command"][1:3] == ["dra", "plugin"]
