"""Queues with guaranteed and shared capacity, built on the scheduling engine.

* ``spec``: the queue file (YAML, validated: errors name the key and the file).
* ``tree``: guarantees, limits, lending limits, weights and usage; the rules.
* ``loop``: ``AdmissionLoop`` (submit, cancel, finish, tick; events).
* ``preemption`` / ``victims``: who may be evicted and the cheapest set that makes room.
* ``workload`` / ``replay``: timed workloads and their replay with per-queue figures.
* ``runner``: ``QueueRunner``, the loop's decisions committed to a ledger (allocate, evict, release).
"""

from hami_devices.queueing.events import Event, EventKind, EvictionReason, WaitReason
from hami_devices.queueing.loop import AdmissionLoop, PreemptionPlan
from hami_devices.queueing.runner import QueueRunner
from hami_devices.queueing.spec import QueueFile, QueueSpec, load_queues, parse_queues
from hami_devices.queueing.tasks import Task, TaskState

__all__ = [
    "AdmissionLoop",
    "Event",
    "EventKind",
    "EvictionReason",
    "PreemptionPlan",
    "QueueFile",
    "QueueRunner",
    "QueueSpec",
    "Task",
    "TaskState",
    "WaitReason",
    "load_queues",
    "parse_queues",
]
