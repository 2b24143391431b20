"""Prepare/unprepare on a node: the durable ledger and the limiter region are the facts checked."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

import hami_devices as hd
from hami_devices.config import HamiConfig
from hami_devices.kubernetes.dra import cdi, names
from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.kubernetes.dra.claims import parse_claim
from hami_devices.kubernetes.dra.node import NodePlugin
from hami_devices.ledger import LedgerView
from hami_devices.limiter import Region
from hami_devices.registry import VendorRegistry

from .conftest import DRA, INVENTORY, claim, exactly


@pytest.fixture
def ledger(tmp_path: Path) -> hd.SqliteLedger:
    return hd.SqliteLedger(tmp_path / "ledger.db")


def _plugin(node: str, ledger: hd.Ledger, tmp_path: Path, config: HamiConfig, registry: VendorRegistry) -> NodePlugin:
    devices = hd.discover(INVENTORY, config=config, ledger=ledger, registry=registry)
    return NodePlugin(node, devices, ledger, tmp_path / "cdi")


def test_prepare_writes_ledger_and_cdi_and_unprepare_releases_exactly(
    allocator: DraAllocator, ledger: hd.SqliteLedger, tmp_path: Path, config: HamiConfig, registry: VendorRegistry
) -> None:
    allocated = allocator.allocated(yaml.safe_load((DRA / "mixed-tier-claim.yaml").read_text()))
    plugin = _plugin("tiers-a", ledger, tmp_path, config, registry)
    prepared = plugin.prepare(allocated)
    uid = allocated["metadata"]["uid"]
    [handle] = ledger.handles()
    assert handle.id == names.handle_id(uid) == prepared.handle.id
    consumed = [(r["consumedCapacity"]["memory"], r["consumedCapacity"]["cores"])
                for r in allocated["status"]["allocation"]["devices"]["results"]]
    assert [(f"{g.memory_mib}Mi", str(g.cores)) for g in handle.grants] == consumed
    spec = json.loads(prepared.spec_path.read_text())
    assert spec["cdiVersion"] == cdi.CDI_VERSION and spec["kind"] == "hami-devices.io/claim"
    [device] = spec["devices"]
    env = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
    # NVIDIA's container toolkit reads NVIDIA_VISIBLE_DEVICES: the granted GPUs, by uuid
    assert env == {**handle.env_for("tiers-a", "nvidia"), "NVIDIA_VISIBLE_DEVICES": ",".join(handle.uuids)}
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
        f"/dev/nvidia{g.index}" for g in handle.grants] + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert env["CUDA_VISIBLE_DEVICES"].count(",") == 2 and env["LD_PRELOAD"].endswith("libhami_cuda.so")
    region = Region.open(Path(env["HAMI_REGION_PATH"]))  # the limiter region the workload will use
    try:
        limits = [(r.memory_limit_bytes // (1024 * 1024), r.core_limit_pct) for r in region.device_usage()]
        assert limits == [(4096, 30), (12288, 50), (40960, 60)]
    finally:
        region.close()
    assert {m["hostPath"] for m in device["containerEdits"]["mounts"]} == {env["HAMI_REGION_PATH"], env["LD_PRELOAD"]}
    assert set(prepared.cdi_devices) == {"t4/gpu-0", "a30/gpu-2", "h100/gpu-4"}

    assert plugin.unprepare(uid) is True
    assert ledger.handles() == [] and not prepared.spec_path.exists()
    assert not Path(env["HAMI_REGION_PATH"]).exists()
    assert plugin.unprepare(uid) is False  # kubelet retries an unprepare: nothing left, no error


def test_retries_are_idempotent(allocator: DraAllocator, ledger: hd.SqliteLedger, tmp_path: Path,
                                config: HamiConfig, registry: VendorRegistry) -> None:
    allocated = allocator.allocated(claim("retry", [exactly("g", memory="2Gi", cores="10")]))
    plugin = _plugin(allocated["status"]["allocation"]["devices"]["results"][0]["pool"], ledger, tmp_path, config,
                     registry)
    first = plugin.prepare(allocated)
    first.spec_path.unlink()  # a crash between the ledger commit and the spec write
    second = plugin.prepare(allocated)
    assert second.handle == first.handle and second.spec_path.exists()
    assert len(ledger.handles()) == 1
    other = _plugin(plugin.node, ledger, tmp_path, config, registry)  # a restarted plugin process
    assert other.prepare(allocated).handle == first.handle and len(ledger.handles()) == 1


def test_partitions_prepare_as_partitions(allocator: DraAllocator, ledger: hd.SqliteLedger, tmp_path: Path,
                                          config: HamiConfig, registry: VendorRegistry) -> None:
    allocated = allocator.allocated(claim("vnpu", [exactly("n", "vnpu.hami-devices.io", selectors=(
        'device.attributes["hami-devices.io"].partition == "vir10_3c_32g"',))]))
    prepared = _plugin("ascend-b", ledger, tmp_path, config, registry).prepare(allocated)
    [grant] = prepared.handle.grants
    assert grant.partition == "vir10_3c_32g" and grant.memory_mib == 32768
    env = prepared.handle.env_for("ascend-b", "ascend")
    assert env["ASCEND_VNPU_SPECS"] == "vir10_3c_32g"


def test_many_claims_prepare_at_once_safely(allocator: DraAllocator, ledger: hd.SqliteLedger, tmp_path: Path,
                                            config: HamiConfig, registry: VendorRegistry) -> None:
    claims: list[dict[str, Any]] = []
    for i in range(24):  # 24 shares of 3 GiB over the A30s and H100s of one node
        claims.append(allocator.allocated(claim(f"c{i}", [exactly("g", memory="3Gi", cores="4", selectors=(
            'device.attributes["hami-devices.io"].model in ["A30", "H100"]',))])))
    assert {c["status"]["allocation"]["devices"]["results"][0]["pool"] for c in claims} == {"tiers-a"}
    plugin = _plugin("tiers-a", ledger, tmp_path, config, registry)
    errors: list[BaseException] = []

    def work(c: dict[str, Any]) -> None:
        try:
            plugin.prepare(c)
            plugin.prepare(c)  # a retry racing the others
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(c,)) for c in claims]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    handles = ledger.handles()
    assert len(handles) == 24 and {h.id for h in handles} == {names.handle_id(c["metadata"]["uid"]) for c in claims}
    devices = {d.uuid: d for d in hd.discover(INVENTORY, config=config, ledger=ledger, registry=registry)}
    for uuid in {g.uuid for h in handles for g in h.grants}:
        used = devices[uuid].usage()
        assert used.memory_mib <= devices[uuid].info.memory_mib and used.cores <= 100
    threads = [threading.Thread(target=plugin.unprepare, args=(c["metadata"]["uid"],)) for c in claims]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.handles() == [] and not list((tmp_path / "cdi").glob("*.json"))


def test_a_claim_for_another_node_is_refused(allocator: DraAllocator, ledger: hd.SqliteLedger, tmp_path: Path,
                                             config: HamiConfig, registry: VendorRegistry) -> None:
    allocated = allocator.allocated(yaml.safe_load((DRA / "mixed-tier-claim.yaml").read_text()))
    with pytest.raises(hd.InvalidRequest, match=r"no device of hami-devices\.io on node edge-mlu"):
        _plugin("edge-mlu", ledger, tmp_path, config, registry).prepare(allocated)
    assert ledger.handles() == []


def test_prepare_commits_what_hd_allocate_would_place(allocator: DraAllocator, tmp_path: Path, config: HamiConfig,
                                                      registry: VendorRegistry) -> None:
    """Prepare reads the usage of the claim's devices and commits the pinned placement; hd.allocate placing the
    same request itself (an engine over every allocation of the node) commits the same thing."""
    claims = [allocator.allocated(yaml.safe_load((DRA / "mixed-tier-claim.yaml").read_text()))]
    for i in range(8):
        claims.append(allocator.allocated(claim(f"twin{i}", [exactly("g", memory=f"{2 + i}Gi", cores="10", selectors=(
            'device.attributes["hami-devices.io"].model in ["A30", "H100"]',))])))
    fast_ledger, slow_ledger = hd.SqliteLedger(tmp_path / "fast.db"), hd.SqliteLedger(tmp_path / "slow.db")
    plugin = _plugin("tiers-a", fast_ledger, tmp_path / "fast", config, registry)
    reference = _plugin("tiers-a", slow_ledger, tmp_path / "slow", config, registry)
    for c in claims:
        got = plugin.prepare(c).handle
        request, _, used = reference.request_for(parse_claim(c))
        want = hd.allocate(used, request, handle_id=names.handle_id(c["metadata"]["uid"]))
        assert (got.id, got.request, got.grants, got.environments) == (want.id, want.request, want.grants,
                                                                       want.environments)
    granted = [[(e.allocation_id, e.data) for e in ledger.events(kinds=["allocation.granted"])]
               for ledger in (fast_ledger, slow_ledger)]
    assert granted[0] == granted[1] and len(granted[0]) == len(claims)
    assert plugin.ledger_held_s > 0


class InterleavedLedger(hd.SqliteLedger):
    """A ledger another writer commits to right after the n-th read (as another process on the node might)."""

    def __init__(self, path: Path, after_reads: int) -> None:
        super().__init__(path)
        self.after_reads = after_reads
        self.reads = 0
        self.write: Callable[[], Any] | None = None

    @contextmanager
    def reading(self) -> Iterator[LedgerView]:
        try:
            with super().reading() as view:
                yield view
        finally:
            self.reads += 1
        if self.reads == self.after_reads and self.write is not None:
            write, self.write = self.write, None
            write()


def test_a_placement_gone_stale_is_placed_afresh(allocator: DraAllocator, tmp_path: Path, config: HamiConfig,
                                                 registry: VendorRegistry) -> None:
    allocated = allocator.allocated(claim("late", [exactly("g", memory="8Gi", cores="10", selectors=(
        'device.attributes["hami-devices.io"].model == "A30"',))]))
    ledger = InterleavedLedger(tmp_path / "ledger.db", after_reads=2)  # 1: already prepared?  2: the usage
    plugin = _plugin("tiers-a", ledger, tmp_path, config, registry)
    [(_, uuid)] = plugin.request_for(parse_claim(allocated))[1]
    card = [d for d in hd.discover(INVENTORY, config=config, ledger=ledger, registry=registry) if d.uuid == uuid]
    ledger.write = lambda: hd.allocate(card, hd.ResourceRequest.single(uuids=[uuid], memory_mib=20000, cores=10))
    ledger.reads = 0
    with pytest.raises(hd.InsufficientResources) as refused:
        plugin.prepare(allocated)
    # The commit refused the stale placement, then the engine, placing afresh, found the card too full.
    assert "no longer fits" not in str(refused.value)
    assert hd.ReasonCode.CARD_INSUFFICIENT_MEMORY in refused.value.reasons[uuid]
    assert len(ledger.events(kinds=["allocation.refused"])) == 2
    [other] = ledger.handles()
    assert other.id != names.handle_id(allocated["metadata"]["uid"])
    assert not list((tmp_path / "cdi").glob("*.json"))
