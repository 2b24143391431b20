"""Hand-built scenarios, one per rule: borrowing, reclaim of exactly what is needed, minimum runtime,
non-interruptible tasks, floors, lending limits, priority and fair-share preemption, strict FIFO."""

from __future__ import annotations

import pytest

from hami_devices.models import ResourceRequest
from hami_devices.queueing import EventKind, TaskState, WaitReason
from tests.queueing.helpers import cluster, gpu, kinds, make_loop

ONLINE_RESEARCH = {
    "queues": [
        {"name": "online", "guarantee": {"device-cores": 200}},
        {"name": "research"},
    ]
}


def fill_research(loop, count: int, cores: int = 100, now: float = 0.0, **top) -> None:
    for i in range(count):
        loop.submit(gpu(f"r{i}", "research", cores, preemptible=True, **top), now=now)
    loop.tick(now)


def test_research_borrows_idle_guarantee_and_online_reclaims_exactly_one_device() -> None:
    loop, log = make_loop(cluster(("n0", "A100", 2), ("n1", "A100", 2)), ONLINE_RESEARCH)
    fill_research(loop, 4)
    admitted = kinds(log, EventKind.ADMITTED)
    assert [e.reason for e in admitted] == ["borrowing"] * 4  # online's idle guarantee is lent
    assert loop.usage("research")["device-cores"] == 400

    loop.submit(gpu("o1", "online"), now=5)
    events = loop.tick(10)
    evicted = kinds(events, EventKind.EVICTED)
    assert len(evicted) == 1 and evicted[0].reason == "reclaim" and evicted[0].by == "o1"
    assert "online is below its guarantee" in (evicted[0].detail or "")
    assert loop.task("o1").state == TaskState.RUNNING
    assert loop.task(evicted[0].task).state == TaskState.PENDING  # recomputable: requeued
    assert loop.usage("research")["device-cores"] == 300


def test_reclaim_takes_exactly_the_victims_needed_on_a_shared_device() -> None:
    # One device shared by research tasks of 30, 30 and 40 cores; online needs 60.
    loop, _ = make_loop(cluster(("n0", "A100", 1)), ONLINE_RESEARCH)
    for name, cores in (("a", 30), ("b", 30), ("c", 40)):
        loop.submit(gpu(name, "research", cores, preemptible=True), now=0)
    loop.tick(0)
    assert loop.usage("research")["device-cores"] == 100
    loop.submit(gpu("o", "online", 60), now=1)
    events = loop.tick(1)
    victims = {e.task for e in kinds(events, EventKind.EVICTED)}
    assert loop.task("o").state == TaskState.RUNNING
    assert len(victims) == 2
    freed = sum(loop.task(v).request.parts[0].cores for v in victims)
    assert freed >= 60
    # none of them could be spared: each victim alone frees less than 60
    assert all(loop.task(v).request.parts[0].cores < 60 for v in victims)


def test_cheapest_victims_first_lowest_priority_then_recomputable_then_least_lost() -> None:
    loop, _ = make_loop(cluster(("n0", "A100", 4)), ONLINE_RESEARCH)
    loop.submit(gpu("old-low", "research", preemptible=True, priority=0), now=0)
    loop.submit(gpu("high", "research", preemptible=True, priority=5), now=0)
    loop.submit(gpu("fixed", "research", preemptible=True, recomputable=False), now=0)
    loop.tick(0)
    loop.submit(gpu("young-low", "research", preemptible=True, priority=0), now=50)
    loop.tick(50)
    order = []
    for i in range(4):
        loop.submit(gpu(f"o{i}", "online", 50), now=100 + i)
        events = loop.tick(100 + i)
        order += [e.task for e in kinds(events, EventKind.EVICTED)]
    # the guarantee is 200 cores: four half-device tasks need two devices back
    assert order == ["young-low", "old-low"]


def test_non_recomputable_victim_is_not_requeued() -> None:
    loop, log = make_loop(cluster(("n0", "A100", 1)), ONLINE_RESEARCH)
    loop.submit(gpu("stateful", "research", preemptible=True, recomputable=False), now=0)
    loop.tick(0)
    loop.submit(gpu("o", "online"), now=1)
    loop.tick(1)
    assert loop.task("stateful").state == TaskState.EVICTED
    assert not kinds(log, EventKind.REQUEUED)


def test_minimum_runtime_is_respected_and_the_loop_wakes_when_it_passes() -> None:
    queues = {
        "queues": [{"name": "online", "guarantee": {"device-cores": 100}}, {"name": "research", "min-runtime": 100}]
    }
    loop, _ = make_loop(cluster(("n0", "A100", 1)), queues)
    fill_research(loop, 1, now=0)
    loop.submit(gpu("o", "online"), now=10)
    assert not kinds(loop.tick(10), EventKind.EVICTED)
    assert loop.task("o").wait_reason == WaitReason.NO_CAPACITY
    assert loop.tick(99.9) == []  # nothing changed and the minimum runtime has not passed
    events = loop.tick(100)
    assert [e.task for e in kinds(events, EventKind.EVICTED)] == ["r0"]
    assert loop.task("o").state == TaskState.RUNNING


def test_non_interruptible_tasks_are_never_evicted() -> None:
    queues = {
        "queues": [
            {"name": "online", "guarantee": {"device-cores": 100}},
            {"name": "research", "guarantee": {"device-cores": 100}},
        ]
    }
    loop, _ = make_loop(cluster(("n0", "A100", 2)), queues)
    loop.submit(gpu("keep", "research", preemptible=False), now=0)  # within research's own guarantee
    loop.submit(gpu("borrow", "research", preemptible=True), now=0)
    loop.tick(0)
    assert loop.usage("research")["device-cores"] == 200
    loop.submit(gpu("o", "online"), now=1)
    events = loop.tick(1)
    assert [e.task for e in kinds(events, EventKind.EVICTED)] == ["borrow"]
    assert loop.task("keep").state == TaskState.RUNNING


def test_a_non_interruptible_task_never_borrows_what_another_queue_is_guaranteed() -> None:
    queues = {"queues": [{"name": "online", "guarantee": {"device-cores": 100}}, {"name": "research"}]}
    loop, _ = make_loop(cluster(("n0", "A100", 2)), queues)
    loop.submit(gpu("notebook-0", "research", preemptible=False), now=0)
    loop.submit(gpu("notebook-1", "research", preemptible=False), now=0)
    loop.tick(0)
    # the first takes the unguaranteed device; the second would take online's guarantee for good
    assert loop.task("notebook-0").state == TaskState.RUNNING
    assert loop.task("notebook-1").wait_reason == WaitReason.GUARANTEES_RESERVED
    loop.submit(gpu("o", "online"), now=1)
    loop.tick(1)
    assert loop.task("o").state == TaskState.RUNNING


def test_an_eviction_never_takes_a_queue_below_its_guarantee() -> None:
    queues = {
        "queues": [
            {"name": "online", "guarantee": {"device-cores": 200}},
            {"name": "research", "guarantee": {"device-cores": 200}},
        ]
    }
    loop, _ = make_loop(cluster(("n0", "A100", 4)), queues)
    fill_research(loop, 4)  # 200 within its guarantee, 200 borrowed
    for i in range(3):
        loop.submit(gpu(f"o{i}", "online"), now=1)
    events = loop.tick(1)
    assert len(kinds(events, EventKind.EVICTED)) == 2
    assert loop.usage("research")["device-cores"] == 200
    assert loop.task("o2").state == TaskState.PENDING  # over online's guarantee: borrowing, nothing to borrow


def test_hierarchy_reclaims_from_the_other_subtree_down_to_each_guarantee() -> None:
    queues = {
        "queues": [
            {
                "name": "prod",
                "guarantee": {"device-cores": 200},
                "children": [{"name": "serve", "guarantee": {"device-cores": 100}}, {"name": "batch"}],
            },
            {"name": "lab", "children": [{"name": "vision", "weight": 2}, {"name": "nlp"}]},
        ]
    }
    loop, _ = make_loop(cluster(("n0", "A100", 4)), queues)
    for i in range(2):
        loop.submit(gpu(f"v{i}", "vision", preemptible=True), now=0)
        loop.submit(gpu(f"n{i}", "nlp", preemptible=True), now=0)
    loop.tick(0)
    # batch has no guarantee of its own but prod does: a batch task is entitled at prod
    loop.submit(gpu("b0", "batch"), now=1)
    loop.submit(gpu("s0", "serve"), now=1)
    events = loop.tick(1)
    assert len(kinds(events, EventKind.EVICTED)) == 2
    assert all(e.queue in ("vision", "nlp") for e in kinds(events, EventKind.EVICTED))
    assert loop.task("b0").state == TaskState.RUNNING and loop.task("s0").state == TaskState.RUNNING
    # prod is now at its guarantee: a further batch task borrows, and there is nothing to borrow
    loop.submit(gpu("b1", "batch"), now=2)
    assert not kinds(loop.tick(2), EventKind.EVICTED)


def test_priority_preemption_only_where_the_queue_enables_it() -> None:
    for enabled in (False, True):
        queues = {"queues": [{"name": "team", "preemption": {"priority": enabled}}]}
        loop, _ = make_loop(cluster(("n0", "A100", 1)), queues)
        loop.submit(gpu("low", "team", preemptible=True, priority=1), now=0)
        loop.tick(0)
        loop.submit(gpu("same", "team", preemptible=True, priority=1), now=1)
        loop.submit(gpu("urgent", "team", preemptible=True, priority=9), now=1)
        events = loop.tick(1)
        evicted = [(e.task, e.reason) for e in kinds(events, EventKind.EVICTED)]
        assert evicted == ([("low", "priority")] if enabled else [])
        assert loop.task("same").state == TaskState.PENDING  # equal priority never preempts


def test_lending_limit_keeps_part_of_the_guarantee_idle_for_its_owner() -> None:
    queues = {
        "queues": [
            {"name": "online", "guarantee": {"device-cores": 300}, "lending-limit": {"device-cores": 100}},
            {"name": "research"},
        ]
    }
    loop, _ = make_loop(cluster(("n0", "A100", 4)), queues)
    fill_research(loop, 4)
    assert loop.usage("research")["device-cores"] == 200  # 100 unguaranteed + 100 lent
    waiting = [t for t in loop.pending("research") if loop.why_waiting(t)]
    assert waiting and all("lending-limit" in (loop.why_waiting(t) or "") for t in waiting)


def test_limits_bound_a_queue_and_its_parent() -> None:
    queues = {"queues": [{"name": "lab", "limit": {"device-cores": 150}, "children": [{"name": "a"}, {"name": "b"}]}]}
    loop, _ = make_loop(cluster(("n0", "A100", 4)), queues)
    loop.submit(gpu("a0", "a"), now=0)
    loop.submit(gpu("b0", "b", 50), now=0)
    loop.submit(gpu("b1", "b", 50), now=0)
    loop.tick(0)
    assert loop.usage("lab")["device-cores"] == 150
    assert loop.task("b1").wait_reason == WaitReason.QUEUE_LIMIT


def test_no_head_of_line_blocking_unless_strict_fifo() -> None:
    for strict in (False, True):
        queues = {"queues": [{"name": "q", "strict-fifo": strict}]}
        loop, _ = make_loop(cluster(("n0", "A100", 1)), queues)
        loop.submit(gpu("big", "q", 100, models=["H100"]), now=0)  # never fits this cluster
        loop.submit(gpu("small", "q", 50), now=0)
        loop.tick(0)
        assert loop.task("small").state == (TaskState.PENDING if strict else TaskState.RUNNING)


def test_scoped_limit_steers_placement_away_from_the_capped_model() -> None:
    queues = {"queues": [{"name": "q", "limit": {"device-cores@nvidia/A100": 100}}]}
    loop, _ = make_loop(cluster(("a", "A100", 2), ("t", "T4", 2)), queues)
    for i in range(3):
        loop.submit(gpu(f"j{i}", "q"), now=0)
    loop.tick(0)
    models = sorted(loop.task(f"j{i}").placement.grants[0].model for i in range(3))
    assert models == ["A100", "T4", "T4"]


def test_weights_share_idle_capacity_measured() -> None:
    queues = {"queues": [{"name": "a", "weight": 1}, {"name": "b", "weight": 3}]}
    loop, _ = make_loop(cluster(("n0", "A100", 4), ("n1", "A100", 4)), queues)
    for i in range(12):
        loop.submit(gpu(f"a{i}", "a", 50, preemptible=True), now=0)
        loop.submit(gpu(f"b{i}", "b", 50, preemptible=True), now=0)
    loop.tick(0)
    a, b = loop.usage("a")["device-cores"], loop.usage("b")["device-cores"]
    assert a + b == 800
    assert b == pytest.approx(3 * a, abs=50)  # 200 : 600, within one task


def test_fair_share_preemption_settles_at_the_weights_without_ping_pong() -> None:
    queues = {
        "queues": [
            {"name": "a", "min-runtime": 0},
            {"name": "b", "preemption": {"fair-share": True}},
        ]
    }
    loop, _ = make_loop(cluster(("n0", "A100", 4)), queues)
    fill_research_queue = [gpu(f"a{i}", "a", preemptible=True) for i in range(4)]
    for r in fill_research_queue:
        loop.submit(r, now=0)
    loop.tick(0)
    for i in range(4):
        loop.submit(gpu(f"b{i}", "b", preemptible=True), now=1)
    events = loop.tick(1)
    assert {e.reason for e in kinds(events, EventKind.EVICTED)} == {"fair-share"}
    assert loop.usage("a")["device-cores"] == loop.usage("b")["device-cores"] == 200
    # a fixed point: another tick changes nothing, and a's requeued tasks cannot take it back
    assert not [e for e in loop.tick(2) if e.kind in (EventKind.ADMITTED, EventKind.EVICTED)]


def test_no_evictions_when_enable_preemptive_is_off(tmp_path) -> None:
    from hami_devices.queueing import AdmissionLoop

    inventory = tmp_path / "inv.yaml"
    inventory.write_text(
        "nodes:\n  - name: n0\n    cpu_milli: 64000\n    memory_mib: 262144\n"
        "    devices:\n      - {vendor: nvidia, model: A100-80GB, count: 1}\n"
    )
    config = tmp_path / "config.yaml"
    for enabled in (False, True):
        config.write_text(f"scheduler:\n  resource-allocation:\n    enable-preemptive: {str(enabled).lower()}\n")
        loop = AdmissionLoop.from_config(inventory, _queues_file(tmp_path), config)
        assert loop.preemptive is enabled
        loop.submit(gpu("r", "research", preemptible=True), now=0)
        loop.tick(0)
        loop.submit(gpu("o", "online"), now=1)
        events = loop.tick(1)
        assert bool(kinds(events, EventKind.EVICTED)) is enabled
        if not enabled:
            assert "enable-preemptive is false" in next(e.detail for e in events if e.task == "o")


def _queues_file(tmp_path):
    path = tmp_path / "queues.yaml"
    path.write_text("queues:\n  - name: online\n    guarantee: {device-cores: 100}\n  - name: research\n")
    return path


def test_events_by_callback_and_iterator_and_task_lifecycle() -> None:
    loop, log = make_loop(cluster(("n0", "A100", 1)), ONLINE_RESEARCH)
    loop.submit(gpu("a", "research", preemptible=True), now=0)
    loop.submit(gpu("b", "research", preemptible=True), now=0)
    loop.tick(0)
    drained = list(loop.events())
    assert [e.kind for e in drained] == [e.kind for e in log]
    assert list(loop.events()) == []
    loop.cancel("b", now=1)  # pending: dropped
    loop.finish("a", now=2)  # running: freed
    assert loop.usage("research")["device-cores"] == 0
    assert loop.cluster.bookings == {}
    assert [e.kind for e in log[-2:]] == [EventKind.CANCELLED, EventKind.FINISHED]
    with pytest.raises(Exception, match="not running"):
        loop.finish("b")


def test_preemption_for_asks_without_changing_anything() -> None:
    loop, _ = make_loop(cluster(("n0", "A100", 2)), ONLINE_RESEARCH)
    fill_research(loop, 2)
    before = (dict(loop.cluster.bookings), loop.cluster.mem_used.copy(), loop.tree.usage.copy())
    plan = loop.preemption_for(gpu("o", "online"), now=1)
    assert plan is not None and plan.reason == "reclaim" and len(plan.victims) == 1
    assert plan.placement.grants[0].node == "n0"
    assert "below its guarantee" in plan.details[plan.victims[0]]
    assert dict(loop.cluster.bookings).keys() == before[0].keys()
    assert (loop.cluster.mem_used == before[1]).all() and (loop.tree.usage == before[2]).all()
    assert loop.preemption_for(gpu("r9", "research", preemptible=True), now=1) is None  # borrowing: no reclaim


def test_adopt_charges_a_running_booking_to_its_queue() -> None:
    state = cluster(("n0", "A100", 2))
    loop, _ = make_loop(state, ONLINE_RESEARCH)
    request = gpu("legacy", "research", preemptible=True)
    placement = loop.engine.place(request)
    booking = loop.engine.assume(placement)
    task = loop.adopt(request, booking.id, started_at=0)
    assert loop.usage("research")["device-cores"] == 100
    loop.submit(gpu("o1", "online"), now=1)
    loop.submit(gpu("o2", "online"), now=1)
    events = loop.tick(1)
    assert [e.task for e in kinds(events, EventKind.EVICTED)] == [task.name]


def test_unknown_queue_and_parent_queue_are_typed_errors() -> None:
    from hami_devices.errors import InvalidRequest

    loop, _ = make_loop(cluster(("n0", "A100", 1)), {"queues": [{"name": "p", "children": [{"name": "c"}]}]})
    with pytest.raises(InvalidRequest, match="unknown queue 'nope'") as err:
        loop.submit(ResourceRequest.single(queue="nope", count=1))
    assert err.value.field == "queue"
    with pytest.raises(InvalidRequest, match="child queues"):
        loop.submit(ResourceRequest.single(queue="p", count=1))


def test_victims_the_task_can_do_without_are_spared() -> None:
    # Cheapest first frees 25 (a), then 25 (c), then 50 (b): 100 for a task of 75.  Then c, put
    # back, still leaves room: only a and b go.
    loop, _ = make_loop(cluster(("n0", "A100", 1)), ONLINE_RESEARCH)
    loop.submit(gpu("b", "research", 50, preemptible=True), now=0)
    loop.tick(0)
    loop.submit(gpu("c", "research", 25, preemptible=True), now=50)
    loop.tick(50)
    loop.submit(gpu("a", "research", 25, preemptible=True), now=90)
    loop.tick(90)
    loop.submit(gpu("o", "online", 75), now=100)
    events = loop.tick(100)
    assert sorted(e.task for e in kinds(events, EventKind.EVICTED)) == ["a", "b"]
    assert loop.task("c").state == TaskState.RUNNING


def test_reclaim_is_not_blocked_by_a_resource_the_guarantee_does_not_name() -> None:
    # Online is guaranteed device cores only; research's CPU-only tasks hold the node's CPU.
    loop, _ = make_loop(cluster(("n0", "A100", 2), cpu=16_000), ONLINE_RESEARCH)
    for i in range(4):
        loop.submit(ResourceRequest(name=f"cpu{i}", queue="research", preemptible=True, host_cpu_milli=4_000), now=0)
    loop.tick(0)
    assert loop.cluster.node_cpu_free[0] == 0
    loop.submit(gpu("o", "online", host_cpu_milli=6_000), now=1)
    events = loop.tick(1)
    assert len(kinds(events, EventKind.EVICTED)) == 2  # 8,000 CPU freed for 6,000 asked: two 4,000 tasks
    assert loop.task("o").state == TaskState.RUNNING


def test_idle_capacity_is_shared_by_dominant_resource_measured() -> None:
    # a is core-heavy (50 cores, 10% memory), b memory-heavy (10 cores, 50% memory); equal weights.
    queues = {
        "queues": [
            {"name": "a", "limit": {"device-cores": 10_000, "device-memory-mib": 10_000_000}},
            {"name": "b", "limit": {"device-cores": 10_000, "device-memory-mib": 10_000_000}},
        ]
    }
    loop, _ = make_loop(cluster(("n0", "A100", 4), ("n1", "A100", 4)), queues)
    for i in range(16):
        loop.submit(ResourceRequest.single(name=f"a{i}", queue="a", count=1, cores=50, memory_mib=4_000), now=0)
        loop.submit(ResourceRequest.single(name=f"b{i}", queue="b", count=1, cores=10, memory_mib=20_000), now=0)
    loop.tick(0)
    capacity = loop.tree.capacity
    cores, memory = loop.resources.index["device-cores"], loop.resources.index["device-memory-mib"]
    share_a = loop.tree.usage[loop.tree.by_name["a"].index][cores] / capacity[cores]
    share_b = loop.tree.usage[loop.tree.by_name["b"].index][memory] / capacity[memory]
    # each queue's dominant share, measured: within one task of each other
    assert abs(share_a - share_b) <= 50 / capacity[cores] + 1e-9
    assert loop.tree.share(loop.tree.by_name["a"].index) == pytest.approx(share_a)


def test_borrowed_work_goes_before_a_queues_nominal_share() -> None:
    # Two devices; online is guaranteed one, so research's nominal share is the other one's worth.
    # "old" (10 cores since t=0) is inside it; "young" (a whole device since t=80) runs on lent capacity.
    loop, _ = make_loop(
        cluster(("n0", "A100", 2)),
        {"queues": [{"name": "online", "guarantee": {"device-cores": 100}}, {"name": "research"}]},
    )
    loop.submit(gpu("old", "research", 10, preemptible=True), now=0)
    loop.tick(0)
    loop.submit(gpu("young", "research", 100, preemptible=True), now=80)
    loop.tick(80)
    loop.submit(gpu("o", "online", 100), now=100)
    events = loop.tick(100)
    # evicting "old" would lose less work (10 device-seconds against 20), but it is research's own share
    assert [e.task for e in kinds(events, EventKind.EVICTED)] == ["young"]
