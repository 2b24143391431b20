"""The queue tree's own answers, asked in-process: run-time state changes and their errors, guarantees the
cluster cannot honour, and what a refused borrower is told (the mutation run's survivors, each pinned)."""

from __future__ import annotations

import numpy as np
import pytest

from hami_devices.errors import InvalidRequest
from hami_devices.models import RequestPart, ResourceRequest
from hami_devices.queueing import EventKind
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
        loop.tree.set_state(*args)
    assert info.value.field == field
    bad = {"queue": args[0], "state": args[1], "stop-policy": args[2]}[field]
    assert repr(bad) in info.value.message


def test_state_changes_take_effect_and_come_back() -> None:
    loop, _ = _loop()
    a = loop.tree.leaf("a").index
    assert loop.tree.held(a) is None and loop.tree.refuses(a) is None
    loop.tree.set_state("top", state="closed")
    assert loop.tree.held(a) == ("queue-closed", "queue top is closed")
    assert loop.tree.refuses(a) == "queue top is closed: it takes no new tasks"
    loop.tree.set_state("top", state="open")
    loop.tree.set_state("a", stop_policy="hold")
    assert loop.tree.held(a) == ("queue-held", "queue a has stop-policy hold")
    loop.tree.set_state("a", stop_policy="none")
    assert loop.tree.held(a) is None


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
    key = list(loop.tree.resources.keys).index("device-cores")
    free[key] = 12.5
    amount = np.zeros_like(free)
    amount[key] = 10.0
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
    keys = list(tree.resources.keys)
    cores, memory = keys.index("device-cores"), keys.index("device-memory-mib")
    d = tree.leaf("d").index
    free = np.zeros(len(keys))
    free[cores], free[memory] = 250.0, 1_500_000.0
    asks_one_core = np.zeros(len(keys))
    asks_one_core[cores] = 1.0
    blocked = tree.lending_blocked(d, asks_one_core, free, everything=True)
    assert blocked == "250 device-cores are free and other queues keep back 300 of them"
    free[cores] = 400.0
    assert tree.lending_blocked(d, asks_one_core, free, everything=True) is None  # memory short, but not asked
    asks_memory = np.zeros(len(keys))
    asks_memory[memory] = 1.0
    blocked = tree.lending_blocked(d, asks_memory, free, everything=True)
    assert blocked == "1500000 device-memory-mib are free and other queues keep back 2000000 of them"
