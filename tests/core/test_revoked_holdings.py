"""Revoked memory stays booked (issue 37, item 3).

``release --force`` revokes the allocation's limiter region: its workload process can allocate no more, but
the memory it holds stays its own until it exits.  The ledger keeps that memory booked, so no commit and no
scheduler grants it again; once the process exits, the next commit frees it by the path of any release.
The workload is a real process allocating through the fake CUDA driver under the shipped shim.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices.assembly import build_engine
from hami_devices.errors import InsufficientResources, ReasonCode
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import EventKind, SqliteLedger
from hami_devices.limiter import Region
from hami_devices.models import DeviceHandle
from tests.limiter.conftest import Drivers, drivers, wenv
from tests.limiter.helpers import Env

from .test_release_live import Session, workload_env

__all__ = ["drivers", "wenv"]

INVENTORY = {"nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "T4", "count": 1}]}]}
T4_MIB = 15_360
HELD_MIB = 6_000


def region_holds(handle: DeviceHandle) -> int:
    """MiB (rounded up) the live processes of the allocation's one region hold, as the region records it."""
    (path,) = handle.regions.values()
    with Region.open(path) as region:
        used = sum(r.memory_used_bytes for r in region.process_usage() if r.alive)
    return -(-used // (1024 * 1024))


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SqliteLedger]:
    opened = SqliteLedger(tmp_path / "ledger.db")
    yield opened
    opened.close()


def test_what_a_revoked_process_holds_is_not_granted_again(drivers: Drivers, wenv: Env, ledger: SqliteLedger) -> None:
    """Fails before issue 37: the forced release freed the whole grant and 9,361 MiB more was granted on top of
    the 6,000 MiB the revoked process still held."""
    devices = hd.discover(parse_inventory(INVENTORY), ledger=ledger)
    (uuid,) = [d.uuid for d in devices]
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 8_192}]})
    session = Session(workload_env(wenv, handle))
    try:
        assert session.alloc(HELD_MIB) == 0
        held = region_holds(handle)  # what the region charges the process (its allocation, and any context)
        assert held >= HELD_MIB
        hd.release(handle, force=True)
        assert session.alloc(1) != 0  # revoked: it allocates no more, and keeps what it has

        free = T4_MIB - held
        with pytest.raises(InsufficientResources) as refused:
            hd.allocate(devices, {"parts": [{"memory_mib": free + 1}]})
        assert refused.value.reasons[uuid] == [ReasonCode.CARD_INSUFFICIENT_MEMORY]
        # a scheduler started now (another process, the same ledger) sees it booked too
        engine = build_engine(parse_inventory(INVENTORY), ledger=ledger)
        assert engine.cluster.usage_of(uuid).memory_mib == held
        beside = hd.allocate(devices, {"parts": [{"memory_mib": free}]})  # exactly the rest
        hd.release(beside)
    finally:
        session.stop()

    whole = hd.allocate(devices, {"parts": [{"memory_mib": T4_MIB}]})  # the process exited: freed at this commit
    assert whole.grants[0].memory_mib == T4_MIB
    holding = f"revoked-{handle.id}"
    assert [h.id for h in ledger.handles()] == [whole.id]
    (freed,) = ledger.events(allocation_id=holding)
    assert freed.kind == EventKind.RELEASED and freed.data["reason"] == "its revoked processes exited"
    (revoked,) = ledger.events(allocation_id=handle.id, kinds=[EventKind.REVOKED])
    assert revoked.data["holding"]["id"] == holding
    assert [g["memory_mib"] for g in revoked.data["holding"]["grants"]] == [held]
    assert all(not Path(p).exists() for p in handle.regions.values())
