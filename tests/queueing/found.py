"""Scenarios the queue property tests' draws found bugs with, kept as explicit examples for both tests."""

from __future__ import annotations

from typing import Any

from hami_devices.models import RequestPart, ResourceRequest


def task(name: str, queue: str, share: int, *, priority: int = 0, preemptible: bool = False) -> ResourceRequest:
    part = RequestPart(count=1, memory_percent=float(share), cores=share)
    return ResourceRequest(name=name, queue=queue, parts=[part], priority=priority, preemptible=preemptible)


# A draw of a fresh-clone run: b borrowing t12 made the reclaim that t3 had just been refused allowed.
RECLAIM_AFTER_BORROW = {
    "nodes": [3],
    "queues": {"queues": [
        {"name": "a", "weight": 1, "guarantee": {"device-cores": 200}, "limit": {"device-cores": 200},
         "preemption": {"reclaim": True, "priority": False, "fair-share": False}, "strict-fifo": True},
        {"name": "b", "weight": 1, "guarantee": {"device-cores": 100},
         "preemption": {"reclaim": True, "priority": False, "fair-share": False}, "strict-fifo": True},
    ]},
    "tasks": [
        (0.0, None, task("t0", "a", 25)),
        (0.0, None, task("t1", "a", 25)),
        (0.0, None, task("t2", "a", 50)),
        (5.0, None, task("t3", "a", 50, priority=1)),
        (0.0, None, task("t10", "a", 25, priority=1)),
        (5.0, None, task("t12", "b", 25, priority=1, preemptible=True)),
        (0.0, None, task("t13", "b", 75)),
        (0.0, None, task("t14", "b", 50, preemptible=True)),
    ],
}


def kept(name: str, queue: str, share: int, **options: Any) -> ResourceRequest:
    """A task whose eviction loses its work (not requeued)."""
    return task(name, queue, share, **options).model_copy(update={"recomputable": False})


# A draw: t9's refused reclaim was remembered; b's admission of t8 later in the same pass voided that memo
# (b then held enough above its guarantee), yet no second pass came.
RECLAIM_AFTER_REMEMBERED_REFUSAL = {
    "nodes": [2],
    "queues": {"queues": [
        {"name": "a", "weight": 1, "guarantee": {"device-cores": 100}, "limit": {"device-cores": 100},
         "preemption": {"reclaim": True, "priority": False, "fair-share": False}, "strict-fifo": True},
        {"name": "b", "weight": 1, "guarantee": {"device-cores": 100},
         "preemption": {"reclaim": True, "priority": False, "fair-share": False}, "strict-fifo": True},
        {"name": "c", "weight": 1, "limit": {"device-cores": 100},
         "preemption": {"reclaim": True, "priority": False, "fair-share": False}, "strict-fifo": True},
    ]},
    "tasks": [
        (5.0, None, kept("t0", "a", 25)),
        (0.0, None, kept("t1", "b", 50)),
        (0.0, None, kept("t2", "b", 75, preemptible=True)),
        (5.0, None, kept("t3", "a", 25)),
        (5.0, None, kept("t4", "a", 25)),
        (5.0, None, kept("t5", "a", 25)),
        (0.0, None, ResourceRequest(name="t6", queue="a", recomputable=False, parts=[RequestPart(count=2, cores=100)])),
        (0.0, None, kept("t7", "a", 25)),
        (10.0, None, kept("t8", "b", 50, priority=1, preemptible=True)),
        (5.0, None, ResourceRequest(name="t9", queue="a", priority=1, recomputable=False,
                                    parts=[RequestPart(count=1, cores=100)])),
    ],
}
