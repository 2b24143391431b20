"""The DRA kubelet plugin, called by the kubelet's own code (Kubernetes 1.34.4, ``kubeletdriver``), its CDI specs
read by the container runtimes' CDI library.

The kubelet's plugin manager finds our registration socket, calls GetInfo and NotifyRegistrationStatus,
and its DRA plugin manager calls NodePrepareResources / NodeUnprepareResources with k8s.io/kubelet's
stubs. Checked: the answers, the node's ledger, and the CDI specs with each vendor's container toolkit
variables and device files, for a claim with an NVIDIA, an Ascend and a Cambricon device; repeated and
concurrent calls; a plugin killed and started again with the claim still prepared.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import hami_devices as hd
from hami_devices.config import HamiConfig
from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.kubernetes.dra.publish import publish_inventory
from tests.kubernetes.kubelet.harness import KubeletDriver, PluginProcess, build_driver

pytestmark = pytest.mark.kubernetes_peers

HERE = Path(__file__).resolve().parent
INVENTORY = HERE / "inventory.yaml"
NODE = "mixed-1"

# What each vendor's container toolkit gives a container (NVIDIA's container toolkit, Ascend's docker
# runtime, Cambricon's device plugin): the variable naming the devices, the per-device file, the
# control files. Written from their documentation, not read from the adapters.
TOOLKIT = {
    "nvidia": ("NVIDIA_VISIBLE_DEVICES", "/dev/nvidia{index}",
               ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]),
    "ascend": ("ASCEND_VISIBLE_DEVICES", "/dev/davinci{index}",
               ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]),
    "cambricon": ("CAMBRICON_VISIBLE_DEVICES", "/dev/cambricon_dev{index}", ["/dev/cambricon_ctl"]),
}


def _claim(name: str, requests: list[tuple[str, str, dict[str, str]]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a", "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, name))},
        "spec": {"devices": {"requests": [
            {"name": request, "exactly": {"deviceClassName": device_class,
                                          **({"capacity": {"requests": capacity}} if capacity else {})}}
            for request, device_class, capacity in requests
        ]}},
    }


MIXED = _claim("mixed", [("gpu", "gpu.hami-devices.io", {"memory": "4Gi", "cores": "30"}),
                         ("npu", "npu.hami-devices.io", {}),
                         ("mlu", "mlu.hami-devices.io", {"memory": "8Gi", "cores": "50"})])
SHARES = [_claim(f"share-{i}", [("gpu", "gpu.hami-devices.io", {"memory": "1Gi", "cores": "10"})]) for i in range(6)]


def _ref(claim: dict[str, Any]) -> dict[str, str]:
    meta = claim["metadata"]
    return {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}


@dataclass
class Node:
    root: Path
    plugin: PluginProcess
    kubelet: KubeletDriver
    allocated: dict[str, dict[str, Any]]  # claim name -> the claim with status.allocation
    slices: list[dict[str, Any]]

    def ledger_handles(self) -> list[hd.DeviceHandle]:
        return hd.SqliteLedger(self.plugin.ledger).handles()

    def device_attribute(self, device: str, attribute: str) -> Any:
        for s in self.slices:
            if s.get("kind") != "ResourceSlice" or s["spec"].get("pool", {}).get("name") != NODE:
                continue
            for d in s["spec"].get("devices") or []:
                if d["name"] == device:
                    value = d["attributes"][f"hami-devices.io/{attribute}"] if f"hami-devices.io/{attribute}" in \
                        d["attributes"] else d["attributes"][attribute]
                    return next(iter(value.values()))
        raise KeyError(device)


@pytest.fixture(scope="module")
def driver_binary() -> Path:
    return build_driver()


@pytest.fixture
def node(driver_binary: Path) -> Iterator[Node]:
    # unix socket paths are limited to 107 bytes: a short root instead of pytest's tmp_path
    root = Path(tempfile.mkdtemp(prefix="hk-"))
    claims_dir = root / "claims"
    claims_dir.mkdir()
    slices = publish_inventory(INVENTORY, HamiConfig())
    allocator = DraAllocator(slices, HamiConfig())
    allocated = {c["metadata"]["name"]: allocator.allocated(c) for c in [MIXED, *SHARES]}
    for name, claim in allocated.items():
        (claims_dir / f"{name}.yaml").write_text(yaml.safe_dump(claim))
    plugin = PluginProcess(root, INVENTORY, NODE, claims_dir=claims_dir)
    kubelet = None
    try:
        plugin.start()
        kubelet = KubeletDriver(driver_binary, plugin.registry, root / "kubelet.log")
        yield Node(root, plugin, kubelet, allocated, slices)
    finally:
        if kubelet is not None:
            kubelet.close()
        plugin.close()
        shutil.rmtree(root, ignore_errors=True)


def _registered(node: Node, at_least: int = 1) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        answer = node.kubelet.call(op="wait_registered", timeout_s=30)
        if answer.get("registered", 0) >= at_least or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert answer.get("registered", 0) >= at_least and "error" not in answer, answer
    return answer


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = claim["status"]["allocation"]["devices"]["results"]
    return results


def _check_prepared(node: Node, claim: dict[str, Any], answer: dict[str, Any]) -> None:
    uid = claim["metadata"]["uid"]
    assert "error" not in answer, answer
    per_claim = answer["response"]["claims"][uid]
    assert not per_claim.get("error"), per_claim
    devices = sorted(per_claim["devices"], key=lambda d: d["device_name"])
    expected = sorted(_results(claim), key=lambda r: r["device"])
    assert [(d["request_names"], d["pool_name"], d["device_name"]) for d in devices] == \
        [([r["request"]], r["pool"], r["device"]) for r in expected]
    [handle] = [h for h in node.ledger_handles() if uid in h.id]
    assert sorted(g.uuid for g in handle.grants) == sorted(node.device_attribute(r["device"], "uuid")
                                                         for r in expected)
    # every CDI id the kubelet got names a device of the claim's spec, with that vendor's edits
    specs = [json.loads(p.read_text()) for p in (node.plugin.cdi_dir).glob("*.json")]
    cdi_devices = {f"{s['kind']}={d['name']}": d for s in specs for d in s["devices"]}
    for device, result in zip(devices, expected, strict=True):
        [cdi_id] = device["cdi_device_ids"]
        edits = cdi_devices[cdi_id]["containerEdits"]
        vendor = node.device_attribute(result["device"], "vendor")
        variable, per_device, control = TOOLKIT[vendor]
        env = dict(e.split("=", 1) for e in edits["env"])
        same_vendor = [r for r in expected if node.device_attribute(r["device"], "vendor") == vendor]
        indexes = [node.device_attribute(r["device"], "index") for r in same_vendor]
        if vendor == "ascend":
            assert env[variable].split(",") == [str(i) for i in indexes]  # physical ids
        else:
            assert env[variable].split(",") == [node.device_attribute(r["device"], "uuid") for r in same_vendor]
        paths = [n["path"] for n in edits["deviceNodes"]]
        assert paths == [per_device.format(index=i) for i in indexes] + control
        assert all("hostPath" not in n for n in edits["deviceNodes"])


def test_registration_through_the_kubelets_plugin_watcher(node: Node) -> None:
    answer = _registered(node)
    assert answer["registered"] == 1 and answer["last_error"] == ""
    log = node.plugin.log.read_text()
    assert "registered with the kubelet as hami-devices.io" in log  # NotifyRegistrationStatus reached us


def test_mixed_vendor_claim_prepared_and_unprepared_through_grpc(node: Node) -> None:
    _registered(node)
    mixed = node.allocated["mixed"]
    assert {node.device_attribute(r["device"], "vendor") for r in _results(mixed)} == {"nvidia", "ascend", "cambricon"}
    first = node.kubelet.call(op="prepare", claims=[_ref(mixed)])
    _check_prepared(node, mixed, first)
    # the container runtime's side: the CDI library containerd and CRI-O use loads the spec and resolves each id
    uid = mixed["metadata"]["uid"]
    ids = [i for d in first["response"]["claims"][uid]["devices"] for i in d["cdi_device_ids"]]
    runtime = node.kubelet.call(op="cdi", dir=str(node.plugin.cdi_dir), ids=ids)
    assert runtime["errors"] == {} and "refresh_error" not in runtime, runtime
    ours = {f"{s['kind']}={d['name']}": d["containerEdits"]
            for s in (json.loads(p.read_text()) for p in node.plugin.cdi_dir.glob("*.json")) for d in s["devices"]}
    for cdi_id in ids:
        seen = runtime["devices"][cdi_id]
        assert seen is not None, cdi_id
        assert seen["env"] == ours[cdi_id]["env"]
        assert seen["device_nodes"] == [n["path"] for n in ours[cdi_id]["deviceNodes"]]
        assert len(seen["mounts"]) == 2  # the limiter region and the preload shim
    again = node.kubelet.call(op="prepare", claims=[_ref(mixed)])  # the kubelet retries: the same answer
    assert again["response"] == first["response"]
    assert len(node.ledger_handles()) == 1

    done = node.kubelet.call(op="unprepare", claims=[_ref(mixed)])
    assert done["response"]["claims"][mixed["metadata"]["uid"]].get("error", "") == ""
    assert node.ledger_handles() == [] and list(node.plugin.cdi_dir.glob("*.json")) == []
    twice = node.kubelet.call(op="unprepare", claims=[_ref(mixed)])  # nothing left to release: no error
    assert twice["response"]["claims"][mixed["metadata"]["uid"]].get("error", "") == ""


def test_one_bad_claim_fails_alone(node: Node) -> None:
    _registered(node)
    missing = {"namespace": "team-a", "name": "never-written", "uid": "00000000-0000-4000-8000-000000000000"}
    share = node.allocated["share-0"]
    wrong_uid = {**_ref(share), "uid": "00000000-0000-4000-8000-999999999999"}
    answer = node.kubelet.call(op="prepare", claims=[missing, _ref(share), wrong_uid])
    claims = answer["response"]["claims"]
    assert "team-a/never-written" in claims[missing["uid"]]["error"] and "not found" in claims[missing["uid"]]["error"]
    assert "uid" in claims[wrong_uid["uid"]]["error"]
    assert not claims[share["metadata"]["uid"]].get("error")
    assert [h.id for h in node.ledger_handles()] == [f"dra-{share['metadata']['uid']}"]


def test_concurrent_calls_prepare_each_claim_once(node: Node) -> None:
    _registered(node)
    claims = [node.allocated[f"share-{i}"] for i in range(6)]
    calls = [{"op": "prepare", "claims": [_ref(c)]} for c in claims for _ in range(3)]  # each claim three times
    answer = node.kubelet.call(op="concurrent", calls=calls)
    for call, claim in zip(answer["answers"], [c for c in claims for _ in range(3)], strict=True):
        _check_prepared(node, claim, call)
    handles = node.ledger_handles()
    assert sorted(h.id for h in handles) == sorted(f"dra-{c['metadata']['uid']}" for c in claims)
    # the engine's shares of the allocation, not more: each claim's 1 GiB / 10 % once
    assert sorted((g.memory_mib, g.cores) for h in handles for g in h.grants) == [(1024, 10)] * 6

    answer = node.kubelet.call(op="concurrent", calls=[{"op": "unprepare", "claims": [_ref(c)]} for c in claims] * 2)
    assert all(not a["response"]["claims"][uid].get("error")
               for a in answer["answers"] for uid in a["response"]["claims"])
    assert node.ledger_handles() == []


def test_claims_stay_prepared_across_a_plugin_crash_and_restart(node: Node) -> None:
    _registered(node)
    mixed = node.allocated["mixed"]
    before = node.kubelet.call(op="prepare", claims=[_ref(mixed)])
    _check_prepared(node, mixed, before)
    [held] = node.ledger_handles()

    node.plugin.kill()  # crash: both sockets stay behind, the ledger keeps the allocation
    assert node.plugin.registration_socket.exists()
    down = node.kubelet.call(op="prepare", claims=[_ref(mixed)])
    assert "error" in down  # nobody answers on the old endpoint
    assert node.ledger_handles() == [held]

    node.plugin.start()  # the new process replaces the sockets; the kubelet registers it again
    _registered(node, at_least=2)
    after = node.kubelet.call(op="prepare", claims=[_ref(mixed)], retry_s=30)
    assert after["response"] == before["response"] and node.ledger_handles() == [held]
    _check_prepared(node, mixed, after)

    done = node.kubelet.call(op="unprepare", claims=[_ref(mixed)], retry_s=30)
    assert not done["response"]["claims"][mixed["metadata"]["uid"]].get("error")
    assert node.ledger_handles() == []


def test_graceful_stop_withdraws_the_registration(node: Node) -> None:
    _registered(node)
    assert node.plugin.stop() == 0
    assert not node.plugin.registration_socket.exists()
    deadline = time.monotonic() + 20
    while node.kubelet.call(op="registrations")["deregistered"] < 1:
        assert time.monotonic() < deadline, "the kubelet did not see the plugin go"
        time.sleep(0.2)
