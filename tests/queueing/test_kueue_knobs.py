"""Kueue's preemption settings and Volcano's queue states, one scenario each, with and without the knob.

Each scenario is small enough to read the right answer off: which task is evicted (or none),
which waits and why.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_devices.errors import InvalidConfig, InvalidRequest
from hami_devices.models import ResourceRequest
from hami_devices.queueing import EventKind, EvictionReason, TaskState, WaitReason, parse_queues
from hami_devices.queueing.replay import replay
from hami_devices.queueing.workload import TimedTask
from tests.queueing.helpers import cluster, gpu, kinds, make_loop


def queues(*specs: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"queues": list(specs), **top}


def evicted(log: list[Any]) -> list[str]:
    return [e.task for e in kinds(log, EventKind.EVICTED)]


# ---------------------------------------------------------------------- reclaim-within-cohort
@pytest.mark.parametrize(("mode", "victims"), [("any", ["b-1"]), ("lower-priority", []), ("never", [])])
def test_reclaim_within_cohort(mode: str, victims: list[str]) -> None:
    """``a`` is guaranteed one device that ``b`` borrowed with tasks of priority 5; ``a`` asks at priority 1."""
    loop, log = make_loop(cluster(("n", "T4", 2)), queues(
        {"name": "a", "guarantee": {"device-cores": 100}, "preemption": {"reclaim-within-cohort": mode}},
        {"name": "b"}))
    for i in range(2):
        loop.submit(gpu(f"b-{i}", "b", preemptible=True, priority=5), now=i)
    loop.tick(now=10)
    loop.submit(gpu("a-0", "a", priority=1), now=20)
    loop.tick(now=20)
    assert evicted(log) == victims  # any: the newest borrowed task; lower-priority: none is below 1
    assert loop.task("a-0").state == (TaskState.RUNNING if victims else TaskState.PENDING)
    # with a lower-priority borrower, lower-priority reclaims too
    if mode == "lower-priority":
        loop.submit(gpu("a-1", "a", priority=9), now=30)
        loop.cancel("a-0", now=30)
        loop.tick(now=30)
        assert evicted(log) == ["b-1"] and loop.task("a-1").state == TaskState.RUNNING


def test_reclaim_shorthand_still_reads_and_contradictions_are_refused() -> None:
    spec = parse_queues(queues({"name": "a", "preemption": {"reclaim": False, "priority": True}}))
    pre = spec.queues[0].preemption
    assert (pre.reclaim_within_cohort, pre.within_queue) == ("never", "lower-priority")
    with pytest.raises(InvalidConfig, match="contradicts"):
        parse_queues(queues({"name": "a", "preemption": {"reclaim": True, "reclaim-within-cohort": "never"}}))


# ---------------------------------------------------------------------- within-queue
def _newer_running(mode: str) -> tuple[Any, list[Any]]:
    """An older two-device task waits in ``q`` while a newer one-device task of the same priority runs; then
    the device a task that cannot be interrupted held in ``q`` frees, and the older task could run if the
    newer one made room."""
    loop, log = make_loop(cluster(("n", "T4", 3)), queues(
        {"name": "q", "guarantee": {"device-cores": 200}, "preemption": {"within-queue": mode}},
        {"name": "other", "guarantee": {"device-cores": 100}}))
    loop.submit(gpu("other-0", "other"), now=0)
    loop.submit(gpu("blocker", "q"), now=0)  # not interruptible: no rule may evict it
    loop.tick(now=0)
    loop.submit(ResourceRequest(name="older", queue="q", preemptible=True, parts=[{"count": 2, "cores": 100}]),
                now=1)
    loop.submit(gpu("newer", "q", preemptible=True), now=2)
    loop.tick(now=2)
    assert loop.task("newer").state == TaskState.RUNNING and loop.task("older").state == TaskState.PENDING
    loop.finish("blocker", now=3)
    loop.tick(now=3)
    return loop, log


@pytest.mark.parametrize(("mode", "victims"), [
    ("lower-or-newer-equal-priority", ["newer"]), ("lower-priority", []), ("never", [])])
def test_within_queue_equal_priority_newer(mode: str, victims: list[str]) -> None:
    loop, log = _newer_running(mode)
    assert evicted(log) == victims
    assert loop.task("older").state == (TaskState.RUNNING if victims else TaskState.PENDING)


@pytest.mark.parametrize(("mode", "victims"), [("lower-priority", ["low"]), ("never", [])])
def test_within_queue_lower_priority(mode: str, victims: list[str]) -> None:
    loop, log = make_loop(cluster(("n", "T4", 1)), queues({"name": "q", "preemption": {"within-queue": mode}}))
    loop.submit(gpu("low", "q", preemptible=True, priority=0), now=0)
    loop.tick(now=0)
    loop.submit(gpu("high", "q", priority=3), now=1)
    loop.tick(now=1)
    assert evicted(log) == victims
    assert [e.reason for e in kinds(log, EventKind.EVICTED)] == [str(EvictionReason.PRIORITY)] * len(victims)


# ---------------------------------------------------------------------- borrow-within-cohort
@pytest.mark.parametrize(("borrow", "victims"), [
    ({"policy": "lower-priority"}, ["b-low"]),
    ({"policy": "lower-priority", "max-priority-threshold": 5}, ["b-low"]),
    ({"policy": "lower-priority", "max-priority-threshold": 2}, []),
    ({"policy": "never"}, []),
])
def test_borrow_within_cohort(borrow: dict[str, Any], victims: list[str]) -> None:
    """Neither queue is guaranteed anything: every admission borrows.  ``a``'s priority-10 task may take a
    device from ``b``'s borrowed tasks of priority 3 and 8 only as its policy and threshold allow."""
    loop, log = make_loop(cluster(("n", "T4", 2)), queues(
        {"name": "a", "preemption": {"borrow-within-cohort": borrow}}, {"name": "b"}))
    loop.submit(gpu("b-low", "b", preemptible=True, priority=3), now=0)
    loop.submit(gpu("b-high", "b", preemptible=True, priority=8), now=0)
    loop.tick(now=0)
    loop.submit(gpu("a-0", "a", priority=10), now=1)
    loop.tick(now=1)
    assert evicted(log) == victims
    if victims:
        assert kinds(log, EventKind.EVICTED)[0].reason == str(EvictionReason.BORROW_WITHIN_COHORT)


def test_borrow_within_cohort_and_fair_share_are_not_combined() -> None:
    with pytest.raises(InvalidConfig, match="borrow-within-cohort and fair-share"):
        parse_queues(queues({"name": "a", "preemption": {"borrow-within-cohort": {"policy": "lower-priority"}}},
                            {"name": "b", "preemption": {"fair-share": True}}))


# ---------------------------------------------------------------------- reclaimable
@pytest.mark.parametrize("reclaimable", [True, False])
def test_reclaimable(reclaimable: bool) -> None:
    """``b`` borrows; ``a`` is guaranteed one of the two devices.  A reclaimable ``b`` borrows both and gives
    one back by eviction; one that is not borrows only the device no queue is guaranteed, so ``a`` fits
    without evicting anything and nothing of ``b`` is ever evicted."""
    loop, log = make_loop(cluster(("n", "T4", 2)), queues(
        {"name": "a", "guarantee": {"device-cores": 100}}, {"name": "b", "reclaimable": reclaimable}))
    for i in range(2):
        loop.submit(gpu(f"b-{i}", "b", preemptible=True), now=i)
    loop.tick(now=10)
    running = [t.name for t in loop.running("b")]
    assert running == (["b-0", "b-1"] if reclaimable else ["b-0"])
    if not reclaimable:
        assert loop.why_waiting(loop.task("b-1")) == WaitReason.GUARANTEES_RESERVED
    loop.submit(gpu("a-0", "a"), now=20)
    loop.tick(now=20)
    assert loop.task("a-0").state == TaskState.RUNNING
    assert evicted(log) == (["b-1"] if reclaimable else [])


# ---------------------------------------------------------------------- state and stop-policy
def test_closed_and_draining_queues_refuse_new_tasks() -> None:
    loop, _ = make_loop(cluster(("n", "T4", 1)), queues({"name": "q"}))
    loop.submit(gpu("running", "q"), now=0)
    loop.tick(now=0)
    loop.submit(gpu("waiting", "q"), now=1)
    loop.set_queue_state("q", state="draining")
    with pytest.raises(InvalidRequest, match="q is draining"):
        loop.submit(gpu("late", "q"), now=2)
    loop.finish("running", now=3)
    loop.tick(now=3)
    assert loop.task("waiting").state == TaskState.RUNNING  # draining admits what already waits
    loop.set_queue_state("q", state="open")
    loop.submit(gpu("third", "q"), now=4)
    loop.set_queue_state("q", state="closed")
    loop.finish("waiting", now=5)
    loop.tick(now=5)
    assert loop.task("third").state == TaskState.PENDING  # closed admits nothing
    assert loop.why_waiting(loop.task("third")) == WaitReason.QUEUE_CLOSED
    with pytest.raises(InvalidRequest, match="q is closed"):
        loop.submit(gpu("later", "q"), now=6)


def test_state_from_the_queue_file_and_a_closed_parent() -> None:
    loop, _ = make_loop(cluster(("n", "T4", 1)), queues(
        {"name": "p", "state": "closed", "children": [{"name": "c"}]}, {"name": "d"}))
    with pytest.raises(InvalidRequest, match="queue p is closed"):
        loop.submit(gpu("x", "c"), now=0)
    loop.submit(gpu("y", "d"), now=0)


@pytest.mark.parametrize("policy", ["hold", "hold-and-drain"])
def test_stop_policy(policy: str) -> None:
    loop, log = make_loop(cluster(("n", "T4", 2)), queues({"name": "q"}))
    loop.submit(gpu("running", "q", recomputable=True), now=0)
    loop.tick(now=0)
    loop.set_queue_state("q", stop_policy=policy)
    loop.submit(gpu("new", "q"), now=1)  # a held queue still takes tasks
    loop.tick(now=1)
    assert loop.task("new").state == TaskState.PENDING
    assert (loop.why_waiting(loop.task("new")) or "").startswith(WaitReason.QUEUE_HELD)
    drained = policy == "hold-and-drain"
    assert loop.task("running").state == (TaskState.PENDING if drained else TaskState.RUNNING)
    assert [e.reason for e in kinds(log, EventKind.EVICTED)] == ([str(EvictionReason.STOP_POLICY)] if drained
                                                                 else [])
    loop.set_queue_state("q", stop_policy="none")
    loop.tick(now=2)
    assert {t.name for t in loop.running("q")} == {"running", "new"}


def test_hold_and_drain_from_the_queue_file_evicts_even_tasks_that_are_not_interruptible() -> None:
    loop, log = make_loop(cluster(("n", "T4", 1)), queues({"name": "q"}))
    loop.submit(gpu("steady", "q", preemptible=False), now=0)
    loop.tick(now=0)
    loop.set_queue_state("q", stop_policy="hold-and-drain")
    loop.tick(now=1)
    assert evicted(log) == ["steady"] and loop.cluster.bookings == {}


# ---------------------------------------------------------------------- priority classes
def test_priority_classes_name_priorities() -> None:
    loop, log = make_loop(cluster(("n", "T4", 1)), queues(
        {"name": "q", "preemption": {"within-queue": "lower-priority"}},
        **{"priority-classes": {"batch": 10, "urgent": 1000}}))
    loop.submit(gpu("bulk", "q", preemptible=True, priority_class="batch"), now=0)
    loop.tick(now=0)
    assert loop.task("bulk").priority == 10
    loop.submit(gpu("page", "q", priority_class="urgent"), now=1)
    loop.tick(now=1)
    assert evicted(log) == ["bulk"] and loop.task("page").priority == 1000
    with pytest.raises(InvalidRequest, match="did you mean urgent"):
        loop.submit(gpu("typo", "q", priority_class="urgnet"), now=2)


def test_a_replay_counts_what_a_closed_queue_refused() -> None:
    loop, _ = make_loop(cluster(("n", "T4", 1)), queues({"name": "open"}, {"name": "shut", "state": "closed"}))
    workload = [TimedTask(gpu(f"t{i}", "shut" if i % 2 else "open", cores=50), arrival=float(i)) for i in range(4)]
    report = replay(loop, workload, tick=1.0)
    assert report.refused == {"shut": 2} and report.groups["open"].admitted == 2
    assert report.to_dict()["refused_submissions"] == {"shut": 2}
