"""One object for a scheduler: an engine built with a ledger decides, commits and keeps its view in step.

The oracle is the ledger's own rows: what each device holds is summed here from the handles the ledger
returns (memory granted plus the context booked beside it, cores, sharers), never read from the engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices.ledger.events import EventKind
from hami_devices.scheduler import Engine
from hami_devices.scheduling.commits import NoLedger

SHARE = {"parts": [{"memory_mib": 2048, "cores": 20, "models": ["T4"]}]}
WHOLE_T4 = {"parts": [{"cores": 100, "models": ["T4"]}]}


def held_by_ledger(ledger: hd.Ledger) -> dict[str, tuple[int, int, int]]:
    """Per device uuid: (memory MiB incl. context, cores, sharers), summed from the ledger's rows."""
    held: dict[str, tuple[int, int, int]] = {}
    for handle in ledger.handles():
        for g in handle.grants:
            mem, cores, sharers = held.get(g.uuid, (0, 0, 0))
            held[g.uuid] = (mem + g.memory_mib + g.context_mib, cores + g.cores, sharers + 1)
    return held


def held_by_engine(engine: Engine) -> dict[str, tuple[int, int, int]]:
    c = engine.cluster
    held = {}
    for uuid, row in c.uuid_index.items():
        if int(c.sharers[row]):
            held[uuid] = (int(c.mem_used[row]), int(c.cores_used[row]), int(c.sharers[row]))
    return held


@pytest.fixture
def ledger(tmp_path: Path) -> hd.SqliteLedger:
    return hd.SqliteLedger(tmp_path / "ledger.db")


def test_allocate_places_commits_and_books_in_the_engine(small_inventory: Path, ledger: hd.SqliteLedger) -> None:
    engine = hd.build_engine(small_inventory, ledger=ledger)
    first = engine.allocate(SHARE, metadata={"workload": "a"})
    second = engine.allocate(hd.ResourceRequest.model_validate(SHARE))
    assert {h.id for h in ledger.handles()} == {first.id, second.id}
    assert set(engine.cluster.bookings) == {first.id, second.id}
    assert held_by_engine(engine) == held_by_ledger(ledger)
    # the same transaction hd.allocate runs: a granted event, with the workload's identity, per allocation
    granted = [e for e in ledger.events() if e.kind == EventKind.GRANTED]
    assert [e.allocation_id for e in granted] == [first.id, second.id]
    assert ledger.get(first.id).metadata == {"workload": "a"}
    # binpack: the second share goes where the first is
    assert second.grants[0].uuid == first.grants[0].uuid


def test_commit_of_a_decision_and_release(small_inventory: Path, ledger: hd.SqliteLedger) -> None:
    engine = hd.build_engine(small_inventory, ledger=ledger)
    placement = engine.place(SHARE)
    handle = engine.commit(placement)
    assert handle.grants == placement.grants
    assert held_by_engine(engine) == held_by_ledger(ledger)
    engine.release(handle)
    assert ledger.handles() == [] and engine.cluster.bookings == {}
    assert held_by_engine(engine) == {}
    with pytest.raises(hd.UnknownAllocation):
        engine.release(handle.id)  # a second release is an error, never a silent double free


def test_a_stale_decision_is_refused_and_refresh_takes_in_other_writers(
    small_inventory: Path, ledger: hd.SqliteLedger
) -> None:
    ours = hd.build_engine(small_inventory, ledger=ledger)
    theirs = hd.build_engine(small_inventory, ledger=ledger)
    taken = [theirs.allocate(WHOLE_T4) for _ in range(4)]  # every T4 of the cluster, exclusively
    stale = ours.place(WHOLE_T4)  # ours has not looked: it still sees the T4 free
    with pytest.raises(hd.InsufficientResources) as refused:
        ours.commit(stale)
    assert refused.value.permanent is False
    assert len(ledger.handles()) == 4
    # the failed commit read the ledger in its transaction: ours is in step now
    assert held_by_engine(ours) == held_by_ledger(ledger)
    theirs.release(taken[0])
    assert ours.refresh() == 0  # nothing new to take in, one allocation to forget
    assert held_by_engine(ours) == held_by_ledger(ledger)
    again = ours.allocate(WHOLE_T4)
    assert again.grants[0].uuid == taken[0].grants[0].uuid


def test_refresh_takes_in_an_allocation_of_hd_allocate(small_inventory: Path, ledger: hd.SqliteLedger) -> None:
    engine = hd.build_engine(small_inventory, ledger=ledger)
    devices = hd.discover(small_inventory, ledger=ledger)
    other = hd.allocate(devices, SHARE)
    assert engine.cluster.bookings == {}
    assert engine.refresh() == 1
    assert set(engine.cluster.bookings) == {other.id}
    assert {d.uuid for d in engine.devices} == {d.uuid for d in devices}  # the same inventory, its own objects
    assert held_by_engine(engine) == held_by_ledger(ledger)


def test_a_restarted_engine_continues_from_the_ledger(small_inventory: Path, ledger: hd.SqliteLedger) -> None:
    before = hd.build_engine(small_inventory, ledger=ledger)
    handles = [before.allocate(SHARE) for _ in range(3)]
    after = hd.build_engine(small_inventory, ledger=hd.SqliteLedger(ledger.path))
    assert set(after.cluster.bookings) == {h.id for h in handles}
    assert held_by_engine(after) == held_by_ledger(ledger)
    after.release(handles[0])
    assert {h.id for h in ledger.handles()} == {h.id for h in handles[1:]}


def test_an_impossible_request_is_refused_and_recorded(small_inventory: Path, ledger: hd.SqliteLedger) -> None:
    engine = hd.build_engine(small_inventory, ledger=ledger)
    with pytest.raises(hd.InsufficientResources) as refused:
        engine.allocate({"parts": [{"count": 3, "cores": 100, "models": ["T4"]}]})
    assert refused.value.permanent is True
    assert ledger.handles() == []
    assert [e.kind for e in ledger.events()] == [EventKind.REFUSED]


def test_an_engine_without_a_ledger_says_how_to_get_one(small_inventory: Path) -> None:
    engine = hd.build_engine(small_inventory)
    for call in (lambda: engine.allocate(SHARE), engine.refresh, lambda: engine.release("x")):
        with pytest.raises(NoLedger, match="ledger="):
            call()
    assert isinstance(NoLedger("allocate"), hd.HamiError)
