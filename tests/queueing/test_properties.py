"""Hypothesis: for random queue trees, clusters and timed task streams, the loop keeps the queue rules.

The rules are the oracle's (``tests/oracles/queue_rules.py``, written from the
README and the queue file's documentation); the oracle keeps its own account
of what runs from the loop's events, and never asks the loop's planner:

* every admission the loop makes is one the rules allow (within limits, entitled
  or within the lending rule, evicting only interruptible tasks that ran their
  queue's minimum runtime, by a rule the task's queue allows, with floors and
  fair shares kept, and fitting once the victims are gone);
* **a fixed point**: after every tick, a forced second tick admits and evicts
  nothing, and no pending task (only the head of a strict-FIFO queue) could be
  admitted by any set of evictions the rules allow (searched exhaustively);
* every victim was needed: with that one victim back (the others gone), the task
  it made room for does not fit;
* what runs is what the oracle counted, and the cluster holds exactly the running
  tasks' bookings.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from hami_devices.models import DeviceInfo, ResourceRequest
from hami_devices.queueing import AdmissionLoop, Event, EventKind, TaskState
from hami_devices.scheduling import ClusterState
from tests.oracles import queue_rules as qr
from tests.oracles.placement_rules import Dev, Host
from tests.queueing.found import RECLAIM_AFTER_BORROW, RECLAIM_AFTER_REMEMBERED_REFUSAL
from tests.queueing.helpers import make_loop

TICK = 10.0
MEMORY_MIB = 40_000


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    nodes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    split = draw(st.sampled_from([10, 2, 3]))  # sharers a device takes: binding when small
    capacity = 100 * sum(nodes)
    nested = draw(st.booleans())
    leaves = ["a", "b", "c"] if nested else draw(st.sampled_from([["a", "b"], ["a", "b", "c"]]))
    budget = capacity
    specs: dict[str, dict[str, Any]] = {}
    for name in leaves:
        guarantee = min(draw(st.sampled_from([100, 200, 0, 50])), budget)
        budget -= guarantee
        spec: dict[str, Any] = {"name": name, "weight": draw(st.sampled_from([1, 2, 3]))}
        if guarantee:
            spec["guarantee"] = {"device-cores": guarantee}
            if draw(st.integers(0, 3)) == 0:
                spec["lending-limit"] = {"device-cores": draw(st.sampled_from([0, guarantee // 2, guarantee]))}
        if draw(st.booleans()):
            spec["min-runtime"] = draw(st.sampled_from([0, 15, 30]))
        spec["preemption"] = {
            "reclaim": draw(st.booleans()) or True,
            "priority": draw(st.sampled_from([True, False])),
            "fair-share": draw(st.sampled_from([True, False])),
        }
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
    for i in range(draw(st.integers(4, 10))):
        cores = draw(st.sampled_from([100, 100, 50, 25, 75]))
        part: dict[str, Any] = {"count": 1 if cores < 100 else draw(st.integers(1, 2)), "cores": cores}
        if cores < 100:
            if draw(st.integers(0, 3)):
                part["memory_percent"] = cores
            else:
                part["memory_mib"] = draw(st.sampled_from([10_000, 20_000, 30_000]))
        preemptible = draw(st.sampled_from([True, True, False]))
        request = ResourceRequest(
            name=f"t{i}",
            queue=draw(st.sampled_from(leaves)),
            priority=draw(st.integers(0, 2)),
            preemptible=preemptible,
            recomputable=draw(st.integers(0, 3)) > 0,
            parts=[part],
        )
        # borrowers first, then the work that may reclaim from them
        arrival = float(draw(st.sampled_from([0, 0, 5] if preemptible else [10, 20, 30, 0])))
        duration = draw(st.sampled_from([None, None, 15.0, 40.0]))
        tasks.append((arrival, duration, request))
    return {"nodes": nodes, "split": split, "queues": {"queues": queues}, "tasks": tasks}


class Ledger:
    """The oracle's own account of what runs, kept from the loop's events, and the rules held against them."""

    def __init__(self, loop: AdmissionLoop, scenario: dict[str, Any]) -> None:
        self.loop = loop
        self.queues = qr.queues_of(scenario["queues"])
        self.hosts = [Host(f"n{i}", 64_000, 256_000) for i in range(len(scenario["nodes"]))]
        self.devices = [
            Dev(f"n{i}-{k}", f"n{i}", k, "nvidia", "A100", MEMORY_MIB, scenario.get("split", 10))
            for i, count in enumerate(scenario["nodes"])
            for k in range(count)
        ]
        self.running: dict[str, qr.Running] = {}
        self.gone: dict[str, qr.Running] = {}

    def world(self, now: float, extra: list[qr.Running] | None = None) -> qr.QueueWorld:
        return qr.QueueWorld(self.queues, [*self.running.values(), *(extra or [])], self.devices, self.hosts, now)

    def on_event(self, event: Event) -> None:
        if event.kind == EventKind.ADMITTED:
            self._admitted(event)
        elif event.kind == EventKind.EVICTED:
            victim = self.running.pop(event.task)
            self.gone[victim.name] = victim
            assert victim.interruptible, f"{victim.name} is not interruptible"
            assert event.time - victim.started_at >= self.queues[victim.queue].min_runtime - 1e-9
        elif event.kind in (EventKind.FINISHED, EventKind.CANCELLED):
            self.running.pop(event.task, None)

    def _admitted(self, event: Event) -> None:
        task = self.loop.task(event.task)
        victims = [self.gone[name] for name in event.data.get("evicted", [])]
        rule = "fits" if event.reason in ("guaranteed", "borrowing") else str(event.reason)
        event_note(f"admitted by {rule}")
        before = self.world(event.time, victims)  # the victims ran until this admission
        assert qr.admission_allowed(before, task.request, rule, victims), (
            f"{task.name} admitted by {rule} evicting {[v.name for v in victims]}, which the rules do not allow"
        )
        placement = task.placement
        assert placement is not None
        grants = tuple((g.uuid, g.memory_mib, g.cores, g.exclusive) for g in placement.grants)
        self.running[task.name] = qr.Running(
            task.name, task.request.queue, sum(g.cores for g in placement.grants), task.request.preemptible,
            task.request.priority, event.time, grants,
        )
        for victim in victims:  # each one was needed: with it alone back, the task does not fit
            others = [v for v in victims if v is not victim]
            without_task = [r for r in before.running if r.name not in {v.name for v in others}]
            w = qr.QueueWorld(self.queues, without_task, self.devices, self.hosts, event.time)
            assert not qr.fits_now(w, task.request), f"{victim.name} was evicted for nothing"

    def settled(self, now: float) -> None:
        loop = self.loop
        assert set(self.running) == {t.name for t in loop.running()}
        assert {t.booking_id for t in loop.running()} == set(loop.cluster.bookings)
        again = [e for e in loop.tick(now, force=True) if e.kind in (EventKind.ADMITTED, EventKind.EVICTED)]
        assert again == [], [str(e) for e in again]
        w = self.world(now)
        for name, queue in self.queues.items():
            if queue.children:
                continue
            pending = loop.pending(name)
            for task in pending[:1] if queue.strict_fifo else pending:
                way = next(qr.admissions(w, task.request), None)
                eligible = min(sum(qr.eligible(w, v) for v in w.running), 4)
                event_note(f"a pending task searched, {eligible}{'+' if eligible == 4 else ''} running eligible")
                assert way is None, f"{task.name} could be admitted: {way}"


def event_note(text: str) -> None:
    """What the draws reached (``--hypothesis-show-statistics``)."""
    event(text)



@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True,
          database=None)
@given(scenarios())
@example(RECLAIM_AFTER_BORROW)
@example(RECLAIM_AFTER_REMEMBERED_REFUSAL)
def test_the_loop_settles_by_the_rules(scenario: dict[str, Any]) -> None:
    state = ClusterState()
    for i, count in enumerate(scenario["nodes"]):
        devices = [
            DeviceInfo(uuid=f"n{i}-{k}", index=k, vendor="nvidia", model="A100", node=f"n{i}", memory_mib=MEMORY_MIB,
                       split_count=scenario.get("split", 10))
            for k in range(count)
        ]
        state.add_node(f"n{i}", 64_000, 256_000, devices)
    loop, _ = make_loop(state, scenario["queues"])
    ledger = Ledger(loop, scenario)
    loop.subscribe(ledger.on_event)
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
                loop.submit(request, now=now)
        passes = loop.counters.passes
        loop.tick(now)
        assert loop.counters.passes - passes < 64, "a tick did not settle"
        ledger.settled(now)
    assert all(t.state != TaskState.RUNNING or t.booking_id in loop.cluster.bookings for t in loop.tasks.values())
