"""The node side of the driver: prepare and unprepare allocated claims (what a kubelet plugin does).

``prepare`` turns an allocated claim into an allocation in the node's durable ledger
through ``hd.allocate``: each allocated device becomes a part pinned to that device
(its uuid; the consumed memory and cores, or the partition profile; the claim's
``hami-devices.io/core-policy``), so the engine and
the device's rule re-derive the grant inside the ledger transaction, and the limiter
region and environment are made exactly as for any allocation.  The allocation's id is
fixed by the claim's uid, so a retried prepare finds what an earlier attempt committed
(and rewrites a CDI spec a crash left unwritten); ``unprepare`` releases exactly that
allocation and tolerates one already gone.

Concurrency: the ledger transaction (SQLite ``BEGIN IMMEDIATE``, plus an in-process lock held
exactly around it so threads queue without SQLite's sleeping busy handler) is the only lock two
different claims share.  A per-claim lock only keeps two retries of the *same* claim
apart; reading the claim, building the request and writing the CDI spec run in
parallel across claims, and whether a claim is already prepared is read without the write
lock.  The turn at the ledger is kept short: the request is pinned, so its grants are the
devices' rule applied to their usage now (read, under the in-process lock, from the grants
on those few devices only), and ``hd.allocate`` commits that placement after re-checking each
grant inside the transaction -- instead of rebuilding an engine over every allocation of the
node inside it.  If another process changed those devices in between, the commit refuses the
stale placement and ``hd.allocate`` places the request itself.  ``ledger_held_s`` adds up the
time the ledger was held, so a caller can see when it is the limit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_devices.accounting import usage_of
from hami_devices.allocation import allocate, release_from
from hami_devices.assembly import configure_engine
from hami_devices.device import Device
from hami_devices.errors import InsufficientResources, InvalidRequest, UnknownAllocation
from hami_devices.kubernetes import quantity as q
from hami_devices.kubernetes.dra import cdi, names
from hami_devices.kubernetes.dra.claims import Claim, parse_claim
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceHandle, Grant, RequestPart, ResourceRequest
from hami_devices.rules import evaluate
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Placement


@dataclass(frozen=True)
class PreparedDevice:
    """One allocated device of the claim on this node, and the CDI devices a container using it gets."""

    request: str
    pool: str
    device: str
    cdi_ids: list[str]


@dataclass(frozen=True)
class Prepared:
    """What the kubelet gets back for a claim: the CDI device ids per allocated device, and the allocation."""

    claim_uid: str
    handle: DeviceHandle
    devices: list[PreparedDevice]
    spec_path: Path

    @property
    def cdi_devices(self) -> dict[str, list[str]]:
        """"request/device" -> fully qualified CDI names."""
        return {f"{d.request}/{d.device}": d.cdi_ids for d in self.devices}


class NodePlugin:
    """Prepares this node's share of allocated claims against the node's devices and ledger."""

    def __init__(self, node: str, devices: Sequence[Device], ledger: Ledger, cdi_dir: str | Path) -> None:
        self.node = node
        self.devices = [d for d in devices if d.info.node == node]
        if not self.devices:
            raise InvalidRequest("node", f"no devices on node {node!r}")
        self.ledger = ledger
        self.cdi_dir = Path(cdi_dir)
        self._by_name = {names.device_name(d.info.vendor, d.info.index): d for d in self.devices}
        self._adapters = {d.info.vendor: d.adapter for d in self.devices}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # Threads of this process queue for the ledger transaction here instead of in SQLite's busy
        # handler, whose sleeps (up to 100 ms) dominate under contention; held exactly around it.
        self._ledger_lock = threading.Lock()
        self.ledger_held_s = 0.0
        """Seconds this plugin has held the ledger (its in-process turn, transaction included)."""
        # what hd.allocate's engine would record for the placement it chose
        empty = ClusterState.from_devices(self.devices, [])
        self._policy = configure_engine(empty, self.devices[0].adapter.config).policy.name

    def _claim_lock(self, uid: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(uid, threading.Lock())

    # ------------------------------------------------------------------ prepare
    def prepare(self, claim: Claim | Mapping[str, Any]) -> Prepared:
        if not isinstance(claim, Claim):
            claim = parse_claim(dict(claim))
        request, results, devices = self.request_for(claim)
        handle_id = names.handle_id(claim.uid)
        with self._claim_lock(claim.uid):
            handle = self._existing(handle_id)
            if handle is None:
                try:
                    with self._ledger_turn():
                        handle = self._commit(devices, request, handle_id)
                except InvalidRequest as exc:
                    if exc.field != "handle_id":
                        raise
                    handle = self.ledger.get(handle_id)  # another process prepared it meanwhile
            path = cdi.write_spec(self.cdi_dir, claim.uid, cdi.spec_for(claim.uid, handle, self._adapters))
        by_uuid_vendor = {g.uuid: g.vendor for g in handle.grants}
        answer = [
            PreparedDevice(str(r["request"]), str(r["pool"]), str(r["device"]),
                           [cdi.qualified(claim.uid, by_uuid_vendor[uuid])])
            for r, uuid in results
        ]
        return Prepared(claim.uid, handle, answer, path)

    @contextmanager
    def _ledger_turn(self) -> Iterator[None]:
        with self._ledger_lock:
            start = time.perf_counter()
            try:
                yield
            finally:
                self.ledger_held_s += time.perf_counter() - start

    def _commit(self, devices: Sequence[Device], request: ResourceRequest, handle_id: str) -> DeviceHandle:
        placement = self._pinned_placement(devices, request)
        if placement is not None:
            try:
                return allocate(devices, placement, handle_id=handle_id)
            except InsufficientResources:
                pass  # another process changed these devices since they were read: place afresh
        return allocate(devices, request, handle_id=handle_id)

    def _pinned_placement(self, devices: Sequence[Device], request: ResourceRequest) -> Placement | None:
        """The placement ``hd.allocate``'s engine makes for this pinned request: each part's one device with
        the grant its rule gives on the ledger's usage now (the grant the commit re-checks); None where the
        request does not fit or pins a device twice, so that ``hd.allocate`` decides and explains."""
        by_uuid = {d.uuid: d for d in devices}
        pinned = [part.uuids[0] if len(part.uuids) == 1 else "" for part in request.parts]
        if "" in pinned or len(set(pinned)) != len(pinned) or not all(u in by_uuid for u in pinned):
            return None
        with self.ledger.reading() as view:
            usage = {uuid: usage_of(view.grants_on(uuid)) for uuid in pinned}
        grants: list[Grant] = []
        for i, (part, uuid) in enumerate(zip(request.parts, pinned, strict=True)):
            device = by_uuid[uuid]
            result = evaluate(device.info, device.adapter, part, i, usage[uuid])
            if not isinstance(result, Grant):
                return None
            grants.append(result)
        return Placement(request, self.node, grants, 0.0, {}, {}, self._policy)

    def _existing(self, handle_id: str) -> DeviceHandle | None:
        # A read, not a transaction: asking must not queue behind (or block) another claim's commit.
        try:
            with self.ledger.reading() as view:
                return view.get(handle_id)
        except UnknownAllocation:
            return None

    def request_for(self, claim: Claim) -> tuple[ResourceRequest, list[tuple[dict[str, Any], str]], list[Device]]:
        """One part per allocated device of this node, pinned to it, with what the allocation says it consumes."""
        allocation = claim.allocation
        if not allocation:
            raise InvalidRequest("status.allocation", f"claim {claim.label} is not allocated")
        results = [
            r
            for r in (allocation.get("devices") or {}).get("results") or []
            if r.get("driver") == names.DRIVER and r.get("pool") == self.node
        ]
        if not results:
            raise InvalidRequest("status.allocation.devices.results",
                                 f"claim {claim.label} has no device of {names.DRIVER} on node {self.node}")
        parts: list[RequestPart] = []
        pinned: list[tuple[dict[str, Any], str]] = []
        used: dict[str, Device] = {}
        for i, r in enumerate(results):
            where = f"status.allocation.devices.results[{i}]"
            device = self._device_for(str(r["device"]), where)
            used[device.uuid] = device
            pinned.append((r, device.uuid))
            partition = self._partition_of(str(r["device"]), device)
            if partition is not None:
                parts.append(RequestPart(name=r["request"], uuids=[device.uuid], partition=partition,
                                         core_policy=claim.core_policy))
                continue
            consumed = r.get("consumedCapacity") or {}
            memory = consumed.get("memory")
            cores = q.to_int(consumed.get("cores", "100"), f"{where}.consumedCapacity.cores")
            part = RequestPart(
                name=r["request"],
                uuids=[device.uuid],
                cores=min(cores, 100),
                core_policy=claim.core_policy,
                **({"memory_mib": q.to_mib(memory, f"{where}.consumedCapacity.memory")} if memory else
                   {"memory_percent": 100.0}),
            )
            parts.append(part)
        request = ResourceRequest(name=claim.label, parts=parts, labels={f"{names.DRIVER}/claim-uid": claim.uid})
        return request, pinned, list(used.values())

    def _device_for(self, name: str, where: str) -> Device:
        device = self._by_name.get(name)
        if device is not None:
            return device
        parent = next((d for n, d in self._by_name.items() if name.startswith(n + "-")), None)
        if parent is None:
            raise InvalidRequest(f"{where}.device", f"{name!r} is not a device of node {self.node}")
        return parent

    def _partition_of(self, name: str, device: Device) -> str | None:
        parent = names.device_name(device.info.vendor, device.info.index)
        if name == parent:
            return None
        for profile in device.info.partitions:
            prefix = names.label(f"{parent}-{profile.name}") + "-"
            if name.startswith(prefix) and name[len(prefix):].isdigit():
                return profile.name
        raise InvalidRequest("device", f"{name!r} names no partition profile of {parent}")

    # ------------------------------------------------------------------ unprepare
    def unprepare(self, claim_uid: str) -> bool:
        """Release the claim's allocation and remove its CDI spec; False when there was nothing left to release."""
        with self._claim_lock(claim_uid):
            try:
                with self._ledger_turn():
                    # the kubelet unprepares a claim once its pod's containers are gone: revoke what lingers
                    release_from(self.ledger, names.handle_id(claim_uid), self._adapters, ended=True)
                released = True
            except UnknownAllocation:
                released = False
            cdi.remove_spec(self.cdi_dir, claim_uid)
        with self._locks_guard:
            self._locks.pop(claim_uid, None)
        return released
