"""The queue tree's own answers, asked in-process: run-time state changes and their errors, guarantees the
cluster cannot honour, and what a refused borrower is told (the mutation run's survivors, each pinned)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from hami_devices.errors import InvalidRequest
from hami_devices.models import RequestPart, ResourceRequest
from hami_devices.queueing import EventKind
from hami_devices.queueing.tree import EPS, exceeds, falls_short
from tests.queueing.helpers import cluster, make_loop

QUEUES = {"queues": [
    {"name": "top", "guarantee": {"device-cores": 300}, "children": [
        {"name": "a", "guarantee": {"device-cores": 200}},
        {"name": "b", "guarantee": {"device-cores": 100}},
    ]},
    {"name": "c", "guarantee": {"device-cores": 150}},
    {"name": "d"},
]}


def _loop(devices: int = 4):  # type: ignore[no-untyped-def]
    return make_loop(cluster(("n0", "A100", devices)), QUEUES)


def _keys(tree) -> list[str]:  # type: ignore[no-untyped-def]
    return list(tree.resources.keys)


def _vector(tree, **amounts: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    """A vector over the tree's keys: ``device_cores=100`` sets ``device-cores``."""
    out = np.zeros(len(_keys(tree)))
    for key, value in amounts.items():
        out[_keys(tree).index(key.replace("_", "-"))] = value
    return out


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("nope", "closed", None), "queue"),
        (("a", "shut", None), "state"),
        (("a", None, "pause"), "stop-policy"),
    ],
)
def test_a_bad_state_change_names_its_field(args: tuple[str, str | None, str | None], field: str) -> None:
    loop, _ = _loop()
    with pytest.raises(InvalidRequest) as info:
        loop.tree.switches.set(*args)
    assert info.value.field == field
    bad = {"queue": args[0], "state": args[1], "stop-policy": args[2]}[field]
    assert repr(bad) in info.value.message


def test_state_changes_take_effect_and_come_back() -> None:
    loop, _ = _loop()
    a = loop.tree.leaf("a").index
    assert loop.tree.switches.held(a) is None and loop.tree.switches.refuses(a) is None
    loop.tree.switches.set("top", state="closed")
    assert loop.tree.switches.held(a) == ("queue-closed", "queue top is closed")
    assert loop.tree.switches.refuses(a) == "queue top is closed: it takes no new tasks"
    loop.tree.switches.set("top", state="open")
    loop.tree.switches.set("a", stop_policy="hold")
    assert loop.tree.switches.held(a) == ("queue-held", "queue a has stop-policy hold")
    loop.tree.switches.set("a", stop_policy="none")
    assert loop.tree.switches.held(a) is None


def test_guarantees_the_cluster_cannot_honour_are_named_with_their_sums() -> None:
    """Top-level guarantees 300 + 150 device-cores on 4 devices (400): 450 of 400; the children's own
    guarantees (inside top's) do not add to it, and a resource nobody guarantees is not listed."""
    loop, _ = _loop(4)
    loop.tree.refresh_capacity()
    assert loop.tree.unhonoured() == [("device-cores", 450.0, 400.0)]
    roomy, _ = _loop(5)
    roomy.tree.refresh_capacity()
    assert roomy.tree.unhonoured() == []


def test_kept_back_counts_the_children_that_keep_more_than_their_parent() -> None:
    """top guarantees 300 and uses nothing; a and b together keep back 200 + 100: with ``everything`` the whole
    unused guarantee is kept, and a subtree keeps at least what its children keep."""
    loop, _ = _loop(4)
    tree = loop.tree
    key = list(tree.resources.keys).index("device-cores")
    top, a = tree.by_name["top"].index, tree.leaf("a").index
    assert tree.kept_back(top, everything=True)[key] == 300.0
    assert tree.kept_back(a, everything=True)[key] == 200.0
    assert tree.kept_back(top, everything=False)[key] == pytest.approx(float(tree.kept[top][key]))


def test_a_borrower_that_may_not_borrow_is_told_the_figures() -> None:
    """d guarantees nothing; a non-interruptible task of d may take only what no queue keeps back: 450
    device-cores are guaranteed to others on 4 devices, so a 50 % share waits, told the free and kept figures
    as whole numbers, and a half device-core as a decimal."""
    loop, log = _loop(4)
    task = ResourceRequest(name="d1", queue="d", parts=[RequestPart(count=1, cores=50, memory_percent=50.0)])
    loop.submit(task, now=0.0)
    loop.tick(0.0)
    waiting = [e for e in log if e.kind == EventKind.WAITING and e.task == "d1"]
    assert waiting and "400 device-cores are free and other queues keep back 450 of them" in waiting[-1].detail
    free = np.array(loop.tree.capacity, dtype=float)
    free[_keys(loop.tree).index("device-cores")] = 12.5
    amount = _vector(loop.tree, device_cores=10)
    blocked = loop.tree.lending_blocked(loop.tree.leaf("d").index, amount, free, everything=True)
    assert blocked is not None and blocked.startswith("12.5 device-cores are free and other queues keep back 450")


def test_a_queue_below_its_guarantee_says_on_which_resource() -> None:
    loop, _ = _loop(4)
    assert loop.tree.below_guarantee(loop.tree.leaf("a").index) == ["device-cores"]
    assert loop.tree.below_guarantee(loop.tree.leaf("d").index) == []  # d guarantees nothing


def test_lending_blocks_only_on_what_the_task_asks_for_and_says_large_figures_whole() -> None:
    """Two resources, each kept back by c: a task asking 1 device-core where the cores free fall short is
    blocked; one asking none of the memory is not blocked by the memory already short; figures of millions
    of MiB are written out whole."""
    loop, _ = make_loop(cluster(("n0", "A100", 4), memory_mib=600_000), {"queues": [
        {"name": "c", "guarantee": {"device-cores": 300, "device-memory-mib": 2_000_000}},
        {"name": "d"},
    ]})
    tree = loop.tree
    d = tree.leaf("d").index
    asks_one_core = _vector(tree, device_cores=1)
    free = _vector(tree, device_cores=250, device_memory_mib=1_500_000)
    blocked = tree.lending_blocked(d, asks_one_core, free, everything=True)
    assert blocked == "250 device-cores are free and other queues keep back 300 of them"
    free = _vector(tree, device_cores=400, device_memory_mib=1_500_000)
    assert tree.lending_blocked(d, asks_one_core, free, everything=True) is None  # memory short, but not asked
    asks_memory = _vector(tree, device_memory_mib=1)
    blocked = tree.lending_blocked(d, asks_memory, free, everything=True)
    assert blocked == "1500000 device-memory-mib are free and other queues keep back 2000000 of them"


# ---------------------------------------------------------------- the rules' figures, one at a time


def test_within_the_tolerance_is_neither_over_nor_short() -> None:
    assert not exceeds(np.array([2.0]) + EPS, np.array([2.0])).any()
    assert exceeds(np.array([2.0]) + 2 * EPS, np.array([2.0])).all()
    assert not falls_short(np.array([2.0]) - EPS, np.array([2.0])).any()
    assert falls_short(np.array([2.0]) - 2 * EPS, np.array([2.0])).all()


def test_a_limit_counts_what_an_eviction_would_give_back() -> None:
    loop, _ = make_loop(cluster(("n0", "A100", 4)), {"queues": [{"name": "a", "limit": {"device-cores": 200}}]})
    tree = loop.tree
    a = tree.leaf("a").index
    tree.charge(a, _vector(tree, device_cores=150))
    assert tree.over_limit(a, _vector(tree, device_cores=100)) == (
        "queue a would use 250 device-cores, over its limit 200"
    )
    assert tree.over_limit(a, _vector(tree, device_cores=100), removed={a: _vector(tree, device_cores=50)}) is None
    assert tree.over_limit(a, _vector(tree, device_cores=50)) is None
    assert tree.over_limit(a, _vector(tree, device_cores=50.5)) == (
        "queue a would use 200.5 device-cores, over its limit 200"
    )


def test_a_guarantee_entitles_only_a_task_that_asks_for_what_it_guards() -> None:
    loop, _ = _loop(4)
    tree = loop.tree
    a = tree.leaf("a").index
    assert tree.entitled_at(a, _vector(tree, device_cores=1)) == a
    assert tree.entitled_at(a, _vector(tree, device_cores=200)) == a
    assert tree.entitled_at(a, _vector(tree, device_cores=201)) == tree.by_name["top"].index
    assert tree.entitled_at(a, _vector(tree, host_cpu_milli=1_000)) is None  # nothing of a guarded key


def test_entitlement_counts_what_an_eviction_would_give_back() -> None:
    """a's guarantee is 200 device-cores, top's 300.  With a using 150 and b 100, a task of 100 fits neither
    (a: 250 > 200, top: 350 > 300); with 50 of a's given back it fits a's own (200), with b's 100 given back
    top's (250 of 300, a still 250 of 200)."""
    loop, _ = _loop(4)
    tree = loop.tree
    a, b, top = tree.leaf("a").index, tree.leaf("b").index, tree.by_name["top"].index
    tree.charge(a, _vector(tree, device_cores=150))
    tree.charge(b, _vector(tree, device_cores=100))
    task = _vector(tree, device_cores=100)
    assert tree.entitled_at(a, task) is None
    assert tree.entitled_at(a, task, {a: _vector(tree, device_cores=50), top: _vector(tree, device_cores=50)}) == a
    assert tree.entitled_at(a, task, {b: _vector(tree, device_cores=100), top: _vector(tree, device_cores=100)}) == top
    assert tree.entitled_at(a, task, {b: _vector(tree, device_cores=100)}) is None  # top's usage unchanged: 350


def test_the_common_ancestor_and_the_queues_below_it() -> None:
    loop, _ = _loop(4)
    tree = loop.tree
    top, a, b, c = (tree.by_name[n].index for n in ("top", "a", "b", "c"))
    assert tree.lca(a, b) == top and tree.lca(a, top) == top and tree.lca(top, a) == top
    assert tree.lca(a, c) is None
    assert tree.below_lca(a, b) == (a,)
    assert tree.below_lca(a, c) == (top, a)


def test_only_taking_a_guarded_resource_can_break_its_floor() -> None:
    loop, _ = _loop(4)
    tree = loop.tree
    a = tree.leaf("a").index
    tree.charge(a, _vector(tree, device_cores=100, host_cpu_milli=4_000))  # already 100 below its 200
    assert tree.floor_broken(a, _vector(tree, host_cpu_milli=1_000)) is None
    tree.charge(a, _vector(tree, device_cores=100))  # at its guarantee
    assert tree.floor_broken(a, _vector(tree, device_cores=1)) == (
        "queue a would fall to 199 device-cores, below its guarantee 200"
    )


def test_a_queue_name_that_is_unknown_or_not_a_leaf_is_refused_by_field() -> None:
    loop, _ = _loop(4)
    with pytest.raises(InvalidRequest) as unknown:
        loop.tree.leaf("zz")
    assert unknown.value.field == "queue"
    assert unknown.value.message == "unknown queue 'zz'; queues: a, b, c, d"
    with pytest.raises(InvalidRequest) as inner:
        loop.tree.leaf("top")
    assert inner.value.field == "queue"
    assert inner.value.message == "'top' has child queues; submit to one of its leaves"


def test_the_fair_share_counts_only_what_is_borrowed_of_the_named_resources() -> None:
    """Guarantees and limits name device-cores only: a's share is what it borrows of the 400 device-cores
    (the memory it holds does not count), divided by its weight."""
    loop, _ = make_loop(cluster(("n0", "A100", 4)), {"queues": [
        {"name": "a", "guarantee": {"device-cores": 100}, "weight": 2},
        {"name": "b", "limit": {"device-cores": 400}},
    ]})
    tree = loop.tree
    assert [_keys(tree)[k] for k in tree.share_keys] == ["device-cores"]
    a = tree.leaf("a").index
    tree.charge(a, _vector(tree, device_cores=50, device_memory_mib=150_000))
    assert tree.share(a) == 0.0  # within its guarantee
    tree.charge(a, _vector(tree, device_cores=150))
    assert tree.share(a) == pytest.approx(100 / 400 / 2)
    assert tree.share(a, extra=_vector(tree, device_cores=100)) == pytest.approx(200 / 400 / 2)


def test_a_limit_alone_names_its_resource_for_the_fair_share() -> None:
    loop, _ = make_loop(cluster(("n0", "A100", 4)), {"queues": [
        {"name": "a", "limit": {"device-memory-mib": 100_000}}, {"name": "b"},
    ]})
    assert [_keys(loop.tree)[k] for k in loop.tree.share_keys] == ["device-memory-mib"]


def test_a_resource_the_cluster_holds_none_of_adds_nothing_to_the_share_and_warns_of_nothing() -> None:
    loop, _ = make_loop(cluster(("n0", "A100", 1)), {"queues": [
        {"name": "a", "guarantee": {"devices": 0, "device-cores": 0}}, {"name": "b"},
    ]})
    tree = loop.tree
    a = tree.leaf("a").index
    tree.charge(a, _vector(tree, devices=1, device_cores=50))
    assert tree.share(a) == pytest.approx(1.0)  # 1 of the 1 device borrowed (and half its cores)
    loop.cluster.remove_node("n0")  # every device gone
    tree.refresh_capacity()
    assert tree.capacity[_keys(tree).index("devices")] == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tree.share(a) == 0.0
        tree.uncharge(a, _vector(tree, devices=1, device_cores=50))
        assert tree.share(a) == 0.0


def test_a_lending_limit_keeps_back_only_its_own_resource() -> None:
    loop, _ = make_loop(cluster(("n0", "A100", 4)), {"queues": [
        {"name": "c", "guarantee": {"device-cores": 300, "devices": 3}, "lending-limit": {"device-cores": 100}},
        {"name": "d"},
    ]})
    tree = loop.tree
    c = tree.leaf("c").index
    assert tree.kept[c].tolist() == _vector(tree, device_cores=200).tolist()
    assert not tree.lends_all


def test_a_lending_limit_may_name_a_key_nothing_else_names() -> None:
    spec = {"queues": [{"name": "c", "lending-limit": {"device-cores@nvidia/A100": 0}}, {"name": "d"}]}
    loop, _ = make_loop(cluster(("n0", "A100", 2)), spec)
    assert "device-cores@nvidia/A100" in _keys(loop.tree)


def test_nothing_is_kept_back_when_no_queue_limits_its_lending() -> None:
    """Without lending limits nothing is kept back from a borrower, whatever the free figures say."""
    loop, _ = _loop(4)
    tree = loop.tree
    assert tree.lends_all
    d = tree.leaf("d").index
    assert tree.lending_blocked(d, _vector(tree, device_cores=50), _vector(tree, device_cores=10)) is None
