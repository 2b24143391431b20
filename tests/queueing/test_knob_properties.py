"""Hypothesis: for random queue trees, clusters and timed task streams, the loop settles.

After every tick, and during it on every event:

* **fixed point**: a forced second tick at the same time admits and evicts nothing,
  and no pending task could be admitted now, with or without evictions the rules
  allow (``preemption_for``), except behind the head of a strict-FIFO queue: so no
  capacity is left idle while a task that fits waits behind one that does not;
* every eviction is of an interruptible task that has run its queue's minimum
  runtime, of a reclaimable queue when made for another queue, and leaves every
  queue it is taken from (below the common ancestor with the task it makes room
  for) at or above its guarantee; a stop-policy drain is the only eviction made for
  no task, and no held or closed queue admits anything;
* every victim was needed: with that one victim back (and the others gone), the
  task it made room for does not fit;
* usage is exact: each queue's usage is the sum of its running tasks' charges, and
  the cluster holds exactly the running tasks' bookings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hami_devices.errors import InvalidRequest
from hami_devices.models import RequestPart, ResourceRequest
from hami_devices.queueing import EventKind, TaskState
from hami_devices.queueing.events import Event
from hami_devices.queueing.loop import AdmissionLoop
from hami_devices.scheduling.cluster import PlacementState
from tests.queueing.found import RECLAIM_AFTER_BORROW, RECLAIM_AFTER_REMEMBERED_REFUSAL, kept
from tests.queueing.helpers import cluster, make_loop

TICK = 10.0


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    nodes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    capacity = 100 * sum(nodes)
    nested = draw(st.booleans())
    leaves = ["a", "b", "c"] if nested else draw(st.sampled_from([["a", "b"], ["a", "b", "c"]]))
    budget = capacity
    specs: dict[str, dict[str, Any]] = {}
    borrowing = draw(st.booleans())  # borrow-within-cohort in some queues, else fair-share (never both: Kueue)
    for name in leaves:
        guarantee = draw(st.sampled_from([0, 50, 100, 200]))
        guarantee = min(guarantee, budget)
        budget -= guarantee
        spec: dict[str, Any] = {"name": name, "weight": draw(st.sampled_from([1, 2, 3]))}
        if guarantee:
            spec["guarantee"] = {"device-cores": guarantee}
        if draw(st.booleans()):
            spec["min-runtime"] = draw(st.sampled_from([0, 15, 30]))
        spec["preemption"] = {
            "reclaim-within-cohort": draw(st.sampled_from(["any", "any", "lower-priority", "never"])),
            "within-queue": draw(st.sampled_from(["never", "lower-priority", "lower-or-newer-equal-priority"])),
            "fair-share": not borrowing and draw(st.booleans()),
        }
        if borrowing and draw(st.booleans()):
            threshold = draw(st.sampled_from([None, 0, 1]))
            spec["preemption"]["borrow-within-cohort"] = {"policy": "lower-priority",
                                                          "max-priority-threshold": threshold}
        spec["reclaimable"] = draw(st.integers(0, 3)) > 0
        spec["stop-policy"] = draw(st.sampled_from(["none"] * 6 + ["hold", "hold-and-drain"]))
        spec["state"] = draw(st.sampled_from(["open"] * 6 + ["closed", "draining"]))
        spec["strict-fifo"] = draw(st.integers(0, 5)) == 0
        if draw(st.integers(0, 4)) == 0:
            spec["limit"] = {"device-cores": max(guarantee, draw(st.sampled_from([100, 200, 300])))}
        specs[name] = spec
    if nested:
        parent_guarantee = sum(specs[n].get("guarantee", {}).get("device-cores", 0) for n in ("a", "b"))
        parent: dict[str, Any] = {"name": "p", "children": [specs["a"], specs["b"]]}
        if parent_guarantee:
            parent["guarantee"] = {"device-cores": parent_guarantee}
        queues = [parent, specs["c"]]
    else:
        queues = [specs[n] for n in leaves]
    tasks = []
    for i in range(draw(st.integers(3, 20))):
        cores = draw(st.sampled_from([25, 50, 75, 100]))
        part: dict[str, Any] = {"count": 1 if cores < 100 else draw(st.integers(1, 2)), "cores": cores}
        if cores < 100:
            part["memory_percent"] = cores
        request = ResourceRequest(
            name=f"t{i}",
            queue=draw(st.sampled_from(leaves)),
            priority=draw(st.integers(0, 2)),
            preemptible=draw(st.booleans()),
            recomputable=draw(st.integers(0, 3)) > 0,
            parts=[part],
        )
        arrival = float(draw(st.integers(0, 6)) * 5)
        duration = draw(st.one_of(st.none(), st.integers(5, 60).map(float)))
        tasks.append((arrival, duration, request))
    return {"nodes": nodes, "queues": {"queues": queues}, "tasks": tasks}


def _check_event(loop: AdmissionLoop, event: Event, now_of: dict[str, float]) -> None:
    tree = loop.tree
    if event.kind == EventKind.EVICTED:
        victim = loop.task(event.task)
        if event.reason == "stop-policy":  # drained by its queue's stop-policy, whatever it is
            assert tree.switches.drains(victim.queue) and event.by is None
            return
        assert victim.request.preemptible, f"{victim.name} is not interruptible"
        by = loop.task(event.by or "")
        if by.queue != victim.queue:
            assert tree.reclaimable[victim.queue], f"{victim.name}'s queue is not reclaimable"
        min_runtime = tree.nodes[victim.queue].spec.min_runtime
        assert event.time - now_of[victim.name] >= min_runtime - 1e-9
        for q in tree.below_lca(victim.queue, by.queue):
            guarded = tree.guarded[q] & (victim.charge > 0)
            assert (tree.usage[q][guarded] >= tree.guarantee[q][guarded] - 1e-9).all(), (
                f"{tree.nodes[q].name} went below its guarantee"
            )
    elif event.kind == EventKind.ADMITTED:
        task = loop.task(event.task)
        assert tree.switches.held(task.queue) is None, f"{task.name} admitted by a held or closed queue"
        now_of[task.name] = event.time
        victims = [loop.task(v) for v in event.data.get("evicted", [])]
        if victims:
            _check_needed(loop, task, victims)


def _check_needed(loop: AdmissionLoop, task: Any, victims: list[Any]) -> None:
    """Each victim alone back in place (the others gone, the task not booked): the task does not fit."""
    c = loop.cluster
    booking = c.forget(task.booking_id)
    try:
        for victim in victims:
            back = victim.placement
            restored = c.assume(
                back.node,
                back.grants,
                host_cpu_milli=back.request.host_cpu_milli,
                host_memory_mib=back.request.host_memory_mib,
                booking_id="probe",
            )
            try:
                assert loop.engine.try_place(task.request) is None, f"{victim.name} was evicted for nothing"
            finally:
                c.forget(restored.id)
    finally:
        c.rebook(booking, state=PlacementState.ASSUMED)


def _check_state(loop: AdmissionLoop, now: float) -> None:
    tree, c = loop.tree, loop.cluster
    running = loop.running()
    assert {t.booking_id for t in running} == set(c.bookings)
    for node in tree:
        if node.leaf:
            total = sum((t.charge for t in running if t.queue == node.index), np.zeros(len(loop.resources)))
            assert np.allclose(tree.usage[node.index], total)
    # a fixed point: nothing more happens, and nothing pending could be admitted
    again = [e for e in loop.tick(now, force=True) if e.kind in (EventKind.ADMITTED, EventKind.EVICTED)]
    assert again == [], [str(e) for e in again]
    for queue in tree.leaves():
        pending = loop.pending(queue)
        if tree.by_name[queue].spec.strict_fifo:
            pending = pending[:1]
        for task in pending:
            plan = loop.preemption_for(task.request, now=now)
            assert plan is None, f"{task.name} could be admitted ({plan.reason}, evicting {plan.victims})"


# A draw of a mutation run's seed: at 5, t1 fit but could not borrow (c keeps 100 back); t5's admission
# then took the room it fit in, so evicting b's own lower-priority t0 became allowed, yet no pass followed.
PRIORITY_AFTER_LENDING_REFUSAL = {
    "nodes": [2, 4],
    "queues": {"queues": [
        {"name": "a", "weight": 1, "limit": {"device-cores": 100}, "strict-fifo": True,
         "preemption": {"reclaim-within-cohort": "any", "within-queue": "never", "fair-share": False}},
        {"name": "b", "weight": 1, "strict-fifo": False,
         "preemption": {"reclaim-within-cohort": "any", "within-queue": "lower-priority", "fair-share": False}},
        {"name": "c", "weight": 1, "guarantee": {"device-cores": 100}, "strict-fifo": True,
         "preemption": {"reclaim-within-cohort": "any", "within-queue": "never", "fair-share": False}},
    ]},
    "tasks": [
        (0.0, None, ResourceRequest(name="t0", queue="b", preemptible=True, recomputable=False,
                                    parts=[RequestPart(count=2, cores=100)])),
        (5.0, None, ResourceRequest(name="t1", queue="b", priority=1, recomputable=False,
                                    parts=[RequestPart(count=2, cores=100)])),
        (0.0, None, kept("t2", "a", 25)),
        (0.0, None, kept("t3", "a", 50)),
        (0.0, None, kept("t4", "b", 50)),
        (5.0, None, kept("t5", "b", 75)),
    ],
}


# A draw of a mutation run's seed: asked about pending t8, preemption_for took it as submitted before
# t4 (same time, a dry run's sequence number -1), so t4 looked newer and evictable.
ASKED_IN_LINE = {
    "nodes": [1, 1],
    "queues": {"queues": [
        {"name": "p", "guarantee": {"device-cores": 200}, "children": [
            {"name": "a", "weight": 1, "state": "closed", "strict-fifo": True,
             "preemption": {"reclaim-within-cohort": "any", "within-queue": "never", "fair-share": False}},
            {"name": "b", "weight": 1, "guarantee": {"device-cores": 200}, "strict-fifo": True,
             "preemption": {"reclaim-within-cohort": "any", "within-queue": "lower-or-newer-equal-priority",
                            "fair-share": False}},
        ]},
        {"name": "c", "weight": 1, "strict-fifo": True,
         "preemption": {"reclaim-within-cohort": "any", "within-queue": "never", "fair-share": False}},
    ]},
    "tasks": [
        (0.0, None, kept("t0", "b", 75)),
        (0.0, None, kept("t1", "a", 25)),
        (15.0, None, kept("t4", "b", 75, priority=2, preemptible=True)),
        (15.0, None, kept("t8", "b", 50, priority=2)),
    ],
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
@example(ASKED_IN_LINE)
@example(PRIORITY_AFTER_LENDING_REFUSAL)
@example(RECLAIM_AFTER_BORROW)
@example(RECLAIM_AFTER_REMEMBERED_REFUSAL)
def test_the_loop_settles_by_the_rules(scenario: dict[str, Any]) -> None:
    state = cluster(*[(f"n{i}", "A100", k) for i, k in enumerate(scenario["nodes"])])
    loop, _ = make_loop(state, scenario["queues"])
    now_of: dict[str, float] = {}

    loop.subscribe(lambda event: _check_event(loop, event, now_of))
    arrivals = sorted(scenario["tasks"], key=lambda t: t[0])
    durations = {r.name: d for _, d, r in arrivals}
    times = sorted({a for a, _, _ in arrivals} | {k * TICK for k in range(12)})
    for now in times:
        for task in loop.running():
            duration = durations[task.name]
            if duration is not None and task.started_at is not None and task.started_at + duration <= now:
                loop.finish(task.name, now=now)
        for arrival, _, request in arrivals:
            if arrival == now:
                if loop.tree.switches.refuses(loop.tree.leaf(request.queue).index) is not None:
                    with pytest.raises(InvalidRequest):
                        loop.submit(request, now=now)
                    continue
                loop.submit(request, now=now)
        passes = loop.counters.passes
        loop.tick(now)
        assert loop.counters.passes - passes < 64, "a tick did not settle"
        _check_state(loop, now)
    assert all(t.state != TaskState.RUNNING or t.booking_id in loop.cluster.bookings for t in loop.tasks.values())
