"""The defragmenter on small clusters: its moves against a brute-force search, the budget, the measures, events."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hami_devices.errors import InvalidConfig
from hami_devices.inventory import Inventory, NodeSpec
from hami_devices.ledger.events import Event
from hami_devices.models import DeviceInfo, ResourceRequest
from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.defrag.budget import MoveBudget
from hami_devices.scheduling.defrag.controller import Defragmenter, DefragOptions
from hami_devices.scheduling.defrag.forecast import DemandForecast
from hami_devices.scheduling.defrag.measure import operator_rate
from hami_devices.scheduling.engine import Engine


def _cluster(nodes: int, gpus: int, model: str = "T4") -> ClusterState:
    specs = [
        NodeSpec(
            name=f"n{n}",
            cpu_milli=64000,
            memory_mib=262144,
            devices=[
                DeviceInfo(uuid=f"n{n}-g{g}", index=g, vendor="nvidia", model=model, node=f"n{n}", memory_mib=16000)
                for g in range(gpus)
            ],
        )
        for n in range(nodes)
    ]
    return ClusterState.from_inventory(Inventory(nodes=specs, source="test"))


def _share(name: str, percent: int, preemptible: bool = True, **selectors: list[str]) -> ResourceRequest:
    return ResourceRequest(
        name=name, preemptible=preemptible, host_cpu_milli=1000, host_memory_mib=1024,
        parts=[{"count": 1, "cores": percent, "memory_percent": percent, **selectors}],
    )


def _whole(name: str, **selectors: list[str]) -> ResourceRequest:
    return ResourceRequest(
        name=name, host_cpu_milli=1000, host_memory_mib=1024, parts=[{"count": 1, "cores": 100, **selectors}]
    )


def _put(cluster: ClusterState, request: ResourceRequest, uuid: str) -> Booking:
    """Place ``request`` on device ``uuid`` (a mask, so the request stays as it was asked)."""
    engine = Engine(cluster, "binpack")
    mask = np.zeros(cluster.size, dtype=bool)
    mask[cluster.row(uuid)] = True
    placement = engine.try_place(request, candidates=[mask])
    assert placement is not None
    return engine.assume(placement)


def _min_moves_to_free_one_device(held: dict[str, list[int]], movable: dict[str, list[bool]]) -> int | None:
    """Oracle: the fewest tasks to move so that some device is empty and every moved task fits on another
    device that is not emptied (shares in percent, 100 a device), by trying every assignment."""
    devices = list(held)
    best: int | None = None
    for target in devices:
        if not all(movable[target]):
            continue
        tasks = held[target]
        others = [d for d in devices if d != target]
        for dests in itertools.product(others, repeat=len(tasks)):
            load = {d: sum(held[d]) for d in others}
            for share, d in zip(tasks, dests, strict=True):
                load[d] += share
            if all(v <= 100 for v in load.values()):
                best = len(tasks) if best is None else min(best, len(tasks))
                break
    return best


@pytest.mark.parametrize(
    "layout",
    [
        {"n0-g0": [40], "n0-g1": [30, 30], "n1-g0": [50], "n1-g1": [20]},
        {"n0-g0": [60], "n0-g1": [60], "n1-g0": [30, 30], "n1-g1": [70]},
        {"n0-g0": [90], "n0-g1": [90], "n1-g0": [90], "n1-g1": [50, 40]},
    ],
)
def test_room_for_a_whole_task_takes_the_fewest_moves_a_search_finds(layout: dict[str, list[int]]) -> None:
    cluster = _cluster(2, 2)
    for uuid, shares in layout.items():
        for k, share in enumerate(shares):
            _put(cluster, _share(f"{uuid}-{k}", share), uuid)
    oracle = _min_moves_to_free_one_device(layout, {u: [True] * len(s) for u, s in layout.items()})
    events: list[Event] = []
    defrag = Defragmenter(cluster, DemandForecast(), DefragOptions(share_per_hour=1.0), emit=events.append)
    made = defrag.make_room(_whole("big"), now=0.0)
    assert made is (oracle is not None)
    if oracle is not None:
        assert len(defrag.stats.moves) == oracle
        assert Engine(cluster, "binpack").try_place(_whole("big")) is not None
        assert [e.kind for e in events] == ["task.migrated"] * oracle
        assert all(e.data["before"]["uuids"] != e.data["after"]["uuids"] for e in events)
    # nothing is lost or duplicated: the same bookings hold the same shares
    assert sorted(sum(g.cores for g in b.grants) for b in cluster.bookings.values()) == sorted(
        s for shares in layout.values() for s in shares
    )


def test_a_task_asking_for_a_model_alias_moves_like_any_other() -> None:
    # NVML reports "Tesla T4"; the catalog's model name is "T4": a request may say either, here and in the engine.
    layout = {"n0-g0": [40], "n0-g1": [30]}
    cluster = _cluster(1, 2, model="Tesla T4")
    for uuid, shares in layout.items():
        _put(cluster, _share(f"{uuid}-0", shares[0], models=["T4"]), uuid)
    assert _min_moves_to_free_one_device(layout, {u: [True] for u in layout}) == 1  # 30 + 40 fit on one device
    defrag = Defragmenter(cluster, DemandForecast(), DefragOptions(share_per_hour=1.0))
    assert defrag.make_room(_whole("big", models=["T4"]), now=0.0) is True
    assert len(defrag.stats.moves) == 1
    held = {g.uuid for b in cluster.bookings.values() for g in b.grants}
    assert len(held) == 1  # both tasks on one device now, the other one whole
    assert all(b.request is not None and b.request.parts[0].models == ["T4"] for b in cluster.bookings.values())
    assert Engine(cluster, "binpack").try_place(_whole("big", models=["T4"])) is not None


def test_a_task_is_never_moved_where_its_selectors_forbid() -> None:
    cluster = _cluster(1, 2)
    _put(cluster, _share("a", 40, exclude_uuids=["n0-g1"]), "n0-g0")
    _put(cluster, _share("b", 30, exclude_uuids=["n0-g0"]), "n0-g1")
    defrag = Defragmenter(cluster, DemandForecast(), DefragOptions(share_per_hour=1.0))
    assert defrag.make_room(_whole("big"), now=0.0) is False  # the only room for each is the other's device
    assert not defrag.stats.moves


def test_tasks_that_may_not_move_stay() -> None:
    cluster = _cluster(1, 2)
    _put(cluster, _share("online", 30, preemptible=False), "n0-g0")
    _put(cluster, _share("research", 30), "n0-g1")
    guarded = {"research"}  # e.g. its queue would fall below its guarantee while it moves
    defrag = Defragmenter(
        cluster, DemandForecast(), DefragOptions(share_per_hour=1.0),
        movable=lambda b: b.preemptible and (b.request is None or b.request.name not in guarded),
    )
    assert defrag.make_room(_whole("big"), now=0.0) is False
    assert not defrag.stats.moves


def test_the_budget_caps_moves_per_hour() -> None:
    budget = MoveBudget(share_per_hour=0.05)
    assert budget.allowed(0.0, 100) == 5
    budget.spend(0.0, 5, 100)
    assert budget.allowed(1800.0, 100) == 0
    assert budget.allowed(3600.0, 100) == 5  # the hour has passed
    assert budget.within()
    with pytest.raises(InvalidConfig, match="share_per_hour"):
        MoveBudget(share_per_hour=2.0)
    with pytest.raises(InvalidConfig, match="threshold"):
        DefragOptions(threshold=1.5)


def test_a_round_never_moves_more_than_the_budget() -> None:
    cluster = _cluster(2, 4)
    for g in range(4):
        _put(cluster, _share(f"a{g}", 40), f"n0-g{g}")
        _put(cluster, _share(f"b{g}", 40), f"n1-g{g}")
    defrag = Defragmenter(cluster, DemandForecast(), DefragOptions(threshold=0.0, share_per_hour=0.25))
    defrag.check(0.0, rate=0.5)  # 8 running: 2 moves allowed this hour
    assert 0 < len(defrag.stats.moves) <= 2
    assert defrag.budget.within()
    defrag.check(60.0, rate=0.5)
    assert len(defrag.stats.moves) <= 2


def test_the_operators_rate_is_idle_on_partly_used_devices_over_all_idle() -> None:
    cluster = _cluster(1, 4)
    _put(cluster, _share("a", 40), "n0-g0")  # 60 idle on a partly used device
    _put(cluster, _share("b", 100), "n0-g1")  # full: no idle
    # n0-g2, n0-g3 empty: 200 idle, not fragmented by this definition
    assert operator_rate(cluster) == pytest.approx(60 / 260)
    assert operator_rate(_cluster(1, 2)) == 0.0
