"""QueueRunner: the admission loop's decisions reach the ledger, and engine, loop and ledger stay equal.

The property drives a random stream of submissions, finishes, cancellations and ticks (evictions on)
through a runner over simulated devices and, after every step, compares three views of what runs:
the loop's running tasks and their placements, the engine's bookings, and the ledger's handles.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_devices import MemoryLedger
from hami_devices.accounting import usage_of
from hami_devices.queueing import TaskState
from hami_devices.queueing.runner import QueueRunner
from tests.conftest import EXAMPLES

QUEUES = EXAMPLES / "queues"


def runner(**options: Any) -> QueueRunner:
    return QueueRunner.from_config(QUEUES / "inventory.yaml", QUEUES / "queues.yaml", QUEUES / "config.yaml",
                                   ledger=MemoryLedger(), **options)


def test_admissions_evictions_and_finishes_reach_the_ledger() -> None:
    r = runner()
    for i in range(12):
        r.submit({"name": f"train-{i}", "queue": "vision", "preemptible": True, "parts": [{"cores": 100}]}, now=0)
    r.tick(now=0)
    assert len(r.ledger.handles()) == 12 and r.handle("train-0").env  # every admission is an allocation
    r.submit({"name": "serve", "queue": "online", "parts": [{"cores": 100}]}, now=300)
    events = r.tick(now=300)
    victims = [e.task for e in events if e.kind == "evicted"]
    assert victims and r.loop.task("serve").state == TaskState.RUNNING
    handles = {h.metadata["task"]: h for h in r.ledger.handles()}
    assert "serve" in handles and not set(victims) & set(handles)
    evicted = [e for e in r.ledger.events() if e.kind == "allocation.evicted"]
    assert [e.data["reclaimer"] for e in evicted] == ["serve"] * len(victims)
    r.finish("serve", now=400)
    assert "serve" not in {h.metadata["task"] for h in r.ledger.handles()}


def _check_equal(r: QueueRunner) -> None:
    running = {t.name: t for t in r.loop.running()}
    with_devices = {n for n, t in running.items() if t.placement is not None and t.placement.grants}
    handles = {h.metadata["task"]: h for h in r.ledger.handles()}
    assert set(handles) == with_devices  # the ledger holds exactly the running tasks that hold devices
    for name, handle in handles.items():
        assert sorted(g.uuid for g in handle.grants) == sorted(g.uuid for g in running[name].placement.grants)
        assert handle.request.parts == running[name].request.parts
    cluster = r.loop.cluster
    assert {t.booking_id for t in running.values()} == set(cluster.bookings)
    for device in r.devices:  # per device, the engine's usage is the ledger's
        assert cluster.usage_of(device.uuid) == usage_of(r.ledger.grants_on(device.uuid))


SHAPES = [
    {"parts": [{"cores": 100}]},
    {"parts": [{"cores": 50, "memory_percent": 50}]},
    {"parts": [{"count": 2, "cores": 100}]},
    {"parts": [{"cores": 30, "memory_mib": 4096, "models": ["T4"]}]},
]
STEP = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(["online", "vision", "nlp"]), st.sampled_from(range(len(SHAPES))),
              st.integers(0, 2), st.booleans()),
    st.tuples(st.just("finish"), st.integers(0, 40)),
    st.tuples(st.just("cancel"), st.integers(0, 40)),
    st.tuples(st.just("tick"), st.integers(1, 200)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, min_size=5, max_size=40))
def test_engine_loop_and_ledger_stay_equal(steps: list[tuple[Any, ...]]) -> None:
    r = runner()
    now = 0.0
    names: list[str] = []
    for step in steps:
        if step[0] == "submit":
            _, queue, shape, priority, preemptible = step
            name = f"t{len(names)}"
            names.append(name)
            r.submit({"name": name, "queue": queue, "priority": priority, "preemptible": preemptible,
                      **SHAPES[shape]}, now=now)
        elif step[0] == "tick":
            now += step[1]
            r.tick(now=now)
        elif names:
            task = r.loop.task(names[step[1] % len(names)])
            if step[0] == "finish" and task.state == TaskState.RUNNING:
                r.finish(task.name, now=now)
            elif step[0] == "cancel" and task.state in (TaskState.PENDING, TaskState.RUNNING):
                r.cancel(task.name, now=now)
        _check_equal(r)
    assert Counter(e.kind for e in r.ledger.events())["allocation.granted"] >= len(r.ledger.handles())
