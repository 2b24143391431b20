"""One replay's placement problem, offline: the nodes and the tasks that had arrived when the metric is read.

The openb protocol (``simulate.protocol``) fixes, per seed, the arrival order, and
the metric is read at the first arrival where the arrived GPU requests reach
100 % of capacity.  Which tasks have arrived by then does not depend on where
any was placed (a dropped task still counts as arrived), so the question "how
much GPU share could any placement have granted at that moment" is a packing
problem over a fixed set of tasks: this module states it.

Tasks alike in every field the packing looks at (host CPU, host memory, device
count, share per device, accepted models) form one ``TaskClass``; nodes alike in
CPU, memory, device count and the classes they accept form one ``NodeType``.
A task's GPU value is what ``simulate.openb.share_milli`` counts: its share for a
sharing task (one device, under 1000 thousandths), else 1000 per device.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_devices.simulate.protocol import DEFAULT_INFLATION, arrival_order
from hami_devices.simulate.trace import TraceNodes, TracePods

MILLI = 1000


@dataclass(frozen=True)
class TaskClass:
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    milli: int  # per device: under 1000 only for a sharing task (num_gpu 1)
    models: frozenset[str] | None  # accepted models; None: any
    tasks: tuple[int, ...]  # arrival positions (indices into ``Instance.pods``)
    required: bool = False  # every task of the class must be placed (``admission``)

    @property
    def count(self) -> int:
        return len(self.tasks)

    @property
    def sharing(self) -> bool:
        return self.num_gpu == 1 and self.milli < MILLI

    @property
    def whole(self) -> int:
        """Whole devices it takes (0 for a sharing task)."""
        return 0 if self.sharing else self.num_gpu

    @property
    def value(self) -> int:
        """GPU thousandths it is granted when placed."""
        return self.milli if self.sharing else MILLI * self.num_gpu


@dataclass(frozen=True)
class NodeType:
    cpu_milli: int
    memory_mib: int
    gpus: int
    accepts: tuple[int, ...]  # indices of the task classes that may run on it (model and device count)
    nodes: tuple[int, ...]  # rows of the node list

    @property
    def count(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class Instance:
    classes: tuple[TaskClass, ...]
    types: tuple[NodeType, ...]
    capacity_milli: int
    arrived_milli: int
    pods: tuple[int, ...]  # per arrival, its index in the pod list (a copy repeats an index)
    class_of: tuple[int, ...]  # per arrival, its class (-1: a task without devices)

    def unallocated_pct(self, allocated_milli: float) -> float:
        return 100.0 * (1.0 - min(float(allocated_milli), self.capacity_milli) / self.capacity_milli)


def task_value(num_gpu: int, milli: int) -> int:
    if num_gpu <= 0:
        return 0
    return milli if num_gpu == 1 and milli < MILLI else MILLI * num_gpu


def arrived_at_metric(
    pods: TracePods, capacity_milli: int, seed: int, inflation: float = DEFAULT_INFLATION
) -> list[int]:
    """The arrivals (pod indices, in order) up to the one where the arrived GPU requests reach capacity."""
    order: list[int] = [int(p) for p in arrival_order(pods, capacity_milli, seed, inflation)]
    total = 0
    for k, pod in enumerate(order):
        total += task_value(int(pods.num_gpu[pod]), int(pods.gpu_milli[pod]))
        if total >= capacity_milli:
            return order[: k + 1]
    return order


def build_instance(nodes: TraceNodes, pods: TracePods, arrivals: list[int]) -> Instance:
    """The packing problem of ``arrivals`` on ``nodes`` (tasks without devices are left out: they grant nothing)."""
    grouped: dict[tuple[int, int, int, int, frozenset[str] | None], list[int]] = {}
    arrived = 0
    for position, pod in enumerate(arrivals):
        num, milli = int(pods.num_gpu[pod]), int(pods.gpu_milli[pod])
        arrived += task_value(num, milli)
        if num <= 0:
            continue
        key = (int(pods.cpu_milli[pod]), int(pods.memory_mib[pod]), num, milli if num == 1 else MILLI, pods.spec[pod])
        grouped.setdefault(key, []).append(position)
    classes = tuple(
        TaskClass(cpu, mem, num, milli, models, tuple(members))
        for (cpu, mem, num, milli, models), members in sorted(grouped.items(), key=lambda kv: _class_order(kv[0]))
    )
    by_type: dict[tuple[int, int, int, tuple[int, ...]], list[int]] = {}
    for n in range(len(nodes)):
        gpus = int(nodes.gpus[n])
        model = nodes.models[int(nodes.model_idx[n])] if nodes.model_idx[n] >= 0 else ""
        accepts = tuple(
            i for i, c in enumerate(classes) if c.num_gpu <= gpus and (c.models is None or model in c.models)
        )
        by_type.setdefault((int(nodes.cpu_milli[n]), int(nodes.memory_mib[n]), gpus, accepts), []).append(n)
    types = tuple(
        NodeType(cpu, mem, gpus, accepts, tuple(rows)) for (cpu, mem, gpus, accepts), rows in sorted(by_type.items())
    )
    class_of = [-1] * len(arrivals)
    for i, c in enumerate(classes):
        for position in c.tasks:
            class_of[position] = i
    return Instance(classes, types, nodes.gpu_capacity_milli, arrived, tuple(arrivals), tuple(class_of))


def _class_order(key: tuple[int, int, int, int, frozenset[str] | None]) -> tuple[object, ...]:
    cpu, mem, num, milli, models = key
    return (num, milli, cpu, mem, sorted(models) if models is not None else [])


def instance_for(nodes: TraceNodes, pods: TracePods, seed: int, inflation: float = DEFAULT_INFLATION) -> Instance:
    """The placement problem one replay (``bench/placement.py``'s protocol, this seed) is measured on."""
    return build_instance(nodes, pods, arrived_at_metric(pods, nodes.gpu_capacity_milli, seed, inflation))

