"""Binds: only they commit, never over-commit under concurrency, leave nothing when they fail or time out,
are idempotent per pod UID; the reaper settles expired leases against the API server."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices.kubernetes.extender import Extender, ServerSettings, leases, serve
from hami_devices.testing import RecordingBinder
from tests.kubernetes.extender.conftest import Client, assert_no_overcommit, binding, gpu, pod, small_inventory


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    return small_inventory(tmp_path / "cluster.yaml", nodes=2, per_node=2)  # 4 T4s: three 5000 MiB shares each


@pytest.fixture
def ledger(tmp_path: Path) -> hd.SqliteLedger:
    return hd.SqliteLedger(tmp_path / "ledger.db")


def test_concurrent_binds_to_one_node_never_overcommit(inventory: Path, ledger: hd.SqliteLedger) -> None:
    binder = RecordingBinder(delay_s=0.01)
    ext = Extender(inventory, ledger, binder)
    srv = serve(ext, ServerSettings(port=0, maintenance_s=0, workers=16))
    pods = [pod(f"p{i}", gpu(1, 5000)) for i in range(40)]
    try:
        setup = Client(srv.url)
        for p in pods:  # kube-scheduler filters each pod before it binds it
            assert setup.post("filter", {"Pod": p, "NodeNames": ["node-0", "node-1"]})[0] == 200
        setup.close()
        local = threading.local()

        def bind(i: int) -> tuple[str, str]:
            if not hasattr(local, "client"):
                local.client = Client(srv.url)
            node = "node-0" if i % 4 else "node-1"  # most binds race for node-0
            status, answer = local.client.post("bind", binding(pods[i], node))
            assert status == 200
            return node, answer["Error"]

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(bind, range(len(pods))))
    finally:
        srv.close()
    won = [(i, node) for i, (node, error) in enumerate(results) if not error]
    per_node = {n: sum(1 for _, m in won if m == n) for n in ("node-0", "node-1")}
    assert per_node == {"node-0": 6, "node-1": 6}  # exactly the capacity, everyone else refused
    assert all("does not fit" in error for _, error in results if error)
    handles = ledger.handles()
    assert sorted(h.id for h in handles) == sorted(leases.handle_id(f"uid-p{i}") for i, _ in won)
    assert all(not leases.pending(h) for h in handles)
    assert sorted((c["uid"], c["node"]) for c in binder.calls) == sorted((f"uid-p{i}", n) for i, n in won)
    assert assert_no_overcommit(inventory, ledger) == 12
    ext.resync()
    assert sorted(ext.cluster.bookings) == sorted(h.id for h in handles)


def test_bind_is_idempotent_per_pod_uid(inventory: Path, ledger: hd.SqliteLedger) -> None:
    binder = RecordingBinder()
    ext = Extender(inventory, ledger, binder)
    p = pod("once", gpu(1, 5000))
    ext.filter({"Pod": p, "NodeNames": ["node-0"]})
    assert ext.bind(binding(p, "node-0")) == {"Error": ""}
    assert ext.bind(binding(p, "node-0")) == {"Error": ""}
    assert len(ledger.handles()) == 1 and len(binder.calls) == 1
    assert "already bound to node-0" in ext.bind(binding(p, "node-1"))["Error"]
    assert len(ledger.handles()) == 1


def test_a_failed_api_bind_leaves_no_allocation(inventory: Path, ledger: hd.SqliteLedger) -> None:
    binder = RecordingBinder()
    ext = Extender(inventory, ledger, binder)
    p = pod("unlucky", gpu(1, 5000))
    ext.filter({"Pod": p, "NodeNames": ["node-0"]})
    before = {row: int(ext.cluster.mem_used[row]) for row in range(ext.cluster.size)}
    binder.fail = 1
    assert "refused" in ext.bind(binding(p, "node-0"))["Error"]
    assert ledger.handles() == [] and ext.cluster.bookings == {}
    assert {row: int(ext.cluster.mem_used[row]) for row in range(ext.cluster.size)} == before
    assert ext.bind(binding(p, "node-0")) == {"Error": ""}  # kube-scheduler's retry
    assert len(ledger.handles()) == 1


def test_a_bind_that_times_out_before_the_api_write_leaves_nothing(inventory: Path, ledger: hd.SqliteLedger) -> None:
    binder = RecordingBinder()
    ext = Extender(inventory, ledger, binder)
    srv = serve(ext, ServerSettings(port=0, maintenance_s=0, timeout_s=0.3))
    p = pod("slow", gpu(1, 5000))
    client = Client(srv.url)
    try:
        client.post("filter", {"Pod": p, "NodeNames": ["node-0"]})
        blocker = sqlite3.connect(ledger.path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the ledger: the bind waits for it
        status, answer = client.post("bind", binding(p, "node-0"))
        # an ExtenderBindingResult with its Error, on 200: the only answer kube-scheduler reads the text of
        assert status == 200 and "no answer within" in answer["Error"]
        blocker.execute("COMMIT")  # now the bind commits ... and, past its deadline, takes it back
        blocker.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (ext.cluster.bookings or ledger.handles()):
            time.sleep(0.05)
    finally:
        client.close()
        srv.close()
    assert ledger.handles() == [] and ext.cluster.bookings == {} and binder.calls == []


def test_reaper_settles_expired_leases_against_the_api_server(inventory: Path, ledger: hd.SqliteLedger) -> None:
    binder = RecordingBinder()
    ext = Extender(inventory, ledger, binder, lease_s=1.0)
    crashed, landed, alive, gone = (pod(n, gpu(1, 5000)) for n in ("crashed", "landed", "alive", "gone"))
    for p in (crashed, landed, alive, gone):
        ext.filter({"Pod": p, "NodeNames": ["node-0"]})
    for p in (alive, gone):
        assert ext.bind(binding(p, "node-0")) == {"Error": ""}
    # What a process killed between the ledger commit and the API write leaves: a pending allocation.
    for p in (crashed, landed):
        request = ext._request_of(p)
        assert request is not None
        handle, _ = ext._commit(request, "node-0", leases.handle_id(p["metadata"]["uid"]))
        assert handle is not None and leases.pending(handle)
    ref = ext._request_of(landed)
    assert ref is not None
    binder.bind(ref.pod, "node-0", {})  # ... or the API write landed and only the answer was lost
    binder.finished.add("uid-gone")  # and one pod has ended since
    assert ext.reap(now=time.time()) == {"released": 0, "confirmed": 0, "gone": 1}  # leases not yet expired
    assert ext.reap(now=time.time() + 2) == {"released": 1, "confirmed": 1, "gone": 0}
    left = {h.id: leases.pending(h) for h in ledger.handles()}
    assert left == {leases.handle_id("uid-landed"): False, leases.handle_id("uid-alive"): False}
    assert sorted(ext.cluster.bookings) == sorted(left)
    assert assert_no_overcommit(inventory, ledger) == 2


def test_resync_follows_other_writers(inventory: Path, ledger: hd.SqliteLedger) -> None:
    ext = Extender(inventory, ledger, RecordingBinder())
    devices = hd.discover(inventory, ledger=ledger)
    outside = hd.allocate(devices, {"parts": [{"count": 2, "memory_percent": 100, "cores": 100}]})
    ext.resync()
    verdict = ext.filter({"Pod": pod("late", gpu(1, 1000)), "NodeNames": ["node-0", "node-1"]})
    full = {outside.grants[0].node}
    assert set(verdict["FailedNodes"]) == full and set(verdict["NodeNames"]) == {"node-0", "node-1"} - full
    hd.release(outside)
    ext.resync()
    assert ext.cluster.bookings == {}
