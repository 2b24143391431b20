"""The ledger is the one truth for any number of writers (issue 37, items 1 and 2).

Every rule a placement touches, its node's rows included, is judged again inside the commit, against what the
ledger holds at that moment: two schedulers with stale views cannot both take a node's CPU.  And a ledger that
already holds rows past a limit (written by hand here, as an older release or a bug would) still loads: the
conflicting allocations are listed by id with the rule they break, recorded once, reported by ``doctor``, and
nothing is dropped.

The expected figures come from the inventory written here: a node of 16,000 millicores and 65,536 MiB of host
memory with two T4s of 15,360 MiB each.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices.assembly import build_engine
from hami_devices.config import parse_config
from hami_devices.doctor.conflicts import ledger_conflicts_check
from hami_devices.doctor.report import Status
from hami_devices.errors import InsufficientResources, ReasonCode
from hami_devices.inventory import Inventory, parse_inventory
from hami_devices.ledger import SqliteLedger
from hami_devices.models import DeviceHandle, Grant, ResourceRequest

CONFIG = parse_config({"device-plugin": {"isolation-level": "none"}})
NODE_CPU = 16_000
NODE_MEMORY = 65_536
T4_MIB = 15_360


def inventory(taints: list[dict[str, str]] | None = None, names: tuple[str, ...] = ("n",)) -> Inventory:
    nodes = [
        {
            "name": name,
            "cpu_milli": NODE_CPU,
            "memory_mib": NODE_MEMORY,
            "taints": taints or [],
            "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}],
        }
        for name in names
    ]
    return parse_inventory({"nodes": nodes})


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SqliteLedger]:
    opened = SqliteLedger(tmp_path / "ledger.db")
    yield opened
    opened.close()


def host_totals(ledger: SqliteLedger) -> tuple[int, int]:
    """CPU and host memory the ledger's allocations hold on node n, summed from their requests."""
    handles = ledger.handles()
    return (sum(h.request.host_cpu_milli for h in handles), sum(h.request.host_memory_mib for h in handles))


@pytest.mark.parametrize(
    ("field", "amount", "code"),
    [
        ("host_cpu_milli", 10_000, ReasonCode.NODE_INSUFFICIENT_CPU),
        ("host_memory_mib", 40_000, ReasonCode.NODE_INSUFFICIENT_MEMORY),
    ],
)
def test_two_schedulers_with_stale_views_never_overbook_a_node(
    ledger: SqliteLedger, field: str, amount: int, code: ReasonCode
) -> None:
    """Fails before issue 37: both commits went through and the node held 20,000 of 16,000 millicores."""
    devices = hd.discover(inventory(), config=CONFIG, ledger=ledger)
    first_scheduler = build_engine(inventory(), CONFIG, ledger=ledger)
    second_scheduler = build_engine(inventory(), CONFIG, ledger=ledger)  # built before the first commits
    request = ResourceRequest.single(memory_mib=1_000, **{field: amount})
    ours, theirs = first_scheduler.place(request), second_scheduler.place(request)
    assert ours.node == theirs.node == "n"
    kept = hd.allocate(devices, ours)
    with pytest.raises(InsufficientResources) as refused:
        hd.allocate(devices, theirs)
    assert refused.value.reasons == {"n": [code]}
    assert refused.value.permanent is False
    # nothing of the refused commit was written: one allocation, one grant event
    assert [h.id for h in ledger.handles()] == [kept.id]
    assert [e.allocation_id for e in ledger.events(kinds=["allocation.granted"])] == [kept.id]
    cpu, memory = host_totals(ledger)
    assert cpu <= NODE_CPU and memory <= NODE_MEMORY


def test_a_node_tainted_after_the_decision_refuses_the_commit(ledger: SqliteLedger) -> None:
    devices = hd.discover(inventory([{"key": "maintenance"}]), config=CONFIG, ledger=ledger)
    stale = build_engine(inventory(), CONFIG, ledger=ledger)  # decided before the taint
    placement = stale.place(ResourceRequest(parts=[], host_cpu_milli=1_000))
    with pytest.raises(InsufficientResources) as refused:
        hd.allocate(devices, placement)
    assert refused.value.reasons == {"n": [ReasonCode.NODE_TAINT_NOT_TOLERATED]}
    assert ledger.handles() == []


def test_host_only_requests_commit_through_allocate(ledger: SqliteLedger) -> None:
    """Fails before issue 37: "place a host-only request with Engine.schedule", which commits nothing."""
    devices = hd.discover(inventory(), config=CONFIG, ledger=ledger)
    made = [hd.allocate(devices, {"parts": [], "host_cpu_milli": 5_000}) for _ in range(3)]
    assert all(h.grants == [] and h.node == "n" for h in made)
    with pytest.raises(InsufficientResources) as refused:  # 3 x 5,000 of 16,000: 1,000 left
        hd.allocate(devices, {"parts": [], "host_cpu_milli": 5_000})
    assert ReasonCode.NODE_INSUFFICIENT_CPU in refused.value.codes
    assert host_totals(ledger) == (15_000, 0)
    hd.release(made[0])
    assert hd.allocate(devices, {"parts": [], "host_cpu_milli": 5_000}).node == "n"


# ---- a ledger that already holds conflicting rows ----


def _by_hand(path: Path, handles: list[DeviceHandle]) -> None:
    """Insert allocations with plain SQL, past every rule, as an older release or a bug could have."""
    with sqlite3.connect(path) as conn:
        for handle in handles:
            conn.execute(
                "INSERT INTO allocations (id, body, created_at) VALUES (?, ?, ?)",
                (handle.id, handle.model_dump_json(), handle.created_at),
            )
            conn.executemany(
                "INSERT INTO grants (handle_id, uuid, body) VALUES (?, ?, ?)",
                [(handle.id, g.uuid, g.model_dump_json()) for g in handle.grants],
            )


def _conflicting_rows(devices: list[hd.Device]) -> tuple[list[DeviceHandle], dict[str, dict[str, list[str]]]]:
    """Two host-only allocations taking 20,000 of the node's 16,000 millicores, and two shares taking 20,000
    of a T4's 15,360 MiB; the later of each pair (by creation time) is the one past the limit."""
    info = devices[0].info
    host = ResourceRequest(parts=[], host_cpu_milli=10_000)
    share = ResourceRequest.single(memory_mib=10_000)
    grant = Grant(uuid=info.uuid, node="n", vendor="nvidia", model="T4", index=info.index, part=0,
                  memory_mib=10_000, cores=0)
    rows = [
        DeviceHandle(id="host-a", request=host, grants=[], node="n", created_at=1.0),
        DeviceHandle(id="host-b", request=host, grants=[], node="n", created_at=2.0),
        DeviceHandle(id="share-a", request=share, grants=[grant], created_at=3.0),
        DeviceHandle(id="share-b", request=share, grants=[grant], created_at=4.0),
    ]
    expected = {
        "host-b": {"n": [str(ReasonCode.NODE_INSUFFICIENT_CPU)]},
        "share-b": {info.uuid: [str(ReasonCode.CARD_INSUFFICIENT_MEMORY)]},
    }
    return rows, expected


def test_a_ledger_with_conflicting_rows_loads_lists_them_and_drops_nothing(tmp_path: Path) -> None:
    """Fails before issue 37: loading raised "allocation host-b is already booked, as placement host-a"
    (two host-only allocations matched by the shape of their empty grants), and every later commit too."""
    path = tmp_path / "ledger.db"
    two_nodes = inventory(names=("n", "m"))
    SqliteLedger(path).close()  # the tables, as a release creates them
    rows, expected = _conflicting_rows(hd.discover(inventory(), config=CONFIG))
    _by_hand(path, rows)
    ledger = SqliteLedger(path)
    try:
        engine = build_engine(two_nodes, CONFIG, ledger=ledger)  # a scheduler's restart
        assert {e.allocation_id for e in ledger.events(kinds=["ledger.conflict"])} == set(expected)
        assert {i: {w: [str(c) for c in cs] for w, cs in b.items()} for i, b in engine.cluster.conflicts.items()} \
            == expected
        assert set(engine.cluster.bookings) == {h.id for h in rows}  # booked where they are, nothing dropped
        assert engine.cluster.nodes["n"].cpu_used == 20_000
        engine.cluster.sync(ledger.handles())  # again, as after a missed event
        devices = hd.discover(two_nodes, config=CONFIG, ledger=ledger)
        fresh = hd.allocate(devices, ResourceRequest.single(memory_mib=1_000))
        assert fresh.grants[0].node == "m"
        with pytest.raises(InsufficientResources) as refused:  # node n is past its CPU: the real reason
            hd.allocate(devices, ResourceRequest.single(memory_mib=1_000, uuids=[devices[1].uuid]))
        assert ReasonCode.NODE_INSUFFICIENT_CPU in refused.value.codes
        assert {h.id for h in ledger.handles()} == {h.id for h in rows} | {fresh.id}
        # each conflicting allocation is recorded once, however many times the ledger is loaded
        build_engine(two_nodes, CONFIG, ledger=ledger)
        conflicts = ledger.events(kinds=["ledger.conflict"])
        assert sorted(e.allocation_id or "" for e in conflicts) == sorted(expected)
        assert {e.allocation_id: e.data["breaks"] for e in conflicts} == expected
    finally:
        ledger.close()
    check = ledger_conflicts_check(path)
    assert check.status == Status.WARN
    assert "host-b" in check.why and "share-b" in check.why and "release" in check.action
    assert check.detail["conflicts"] == expected
    reopened = SqliteLedger(path)
    try:
        hd.release("host-b", ledger=reopened)
        hd.release("share-b", ledger=reopened)
    finally:
        reopened.close()
    assert ledger_conflicts_check(path).status == Status.PASS
