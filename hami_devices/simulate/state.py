"""The replay's cluster state: free CPU, host memory and per-GPU share as arrays.

One row per node, one column per GPU slot (``G`` = the largest node); absent
slots hold 0 free, which no task can use.  ``version`` counts changes per
node so that policies can cache per-node work between tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hami_devices.simulate.trace import TraceNodes, TracePods

MILLI = 1000
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class SimTask:
    """One arrival: per-device share ``milli`` on ``num_gpu`` devices of an accepted model."""

    index: int
    cpu: int
    mem: int
    num_gpu: int
    milli: int
    model_ok: BoolArray  # [M + 1]; the last entry stands for "no GPU model"
    key: tuple[int, int, int, int, int]

    @property
    def request_milli(self) -> int:
        return self.num_gpu * self.milli

    @property
    def is_share(self) -> bool:
        return self.num_gpu == 1 and 0 < self.milli < MILLI


def make_tasks(pods: TracePods, models: tuple[str, ...]) -> list[SimTask]:
    """One SimTask per pod row; ``key`` groups identical shapes for caching."""
    spec_ids: dict[frozenset[str] | None, int] = {}
    tasks = []
    for i in range(len(pods)):
        spec = pods.spec[i]
        num, milli = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
        ok = np.ones(len(models) + 1, dtype=bool)
        if num > 0:
            ok[-1] = False  # a GPU task never runs on a GPU-less node
            if spec is not None:
                ok[:-1] = [m in spec for m in models]
        sid = spec_ids.setdefault(spec, len(spec_ids))
        key = (int(pods.cpu_milli[i]), int(pods.memory_mib[i]), num, milli, sid)
        tasks.append(SimTask(i, key[0], key[1], num, milli, ok, key))
    return tasks


class ReplayState:
    def __init__(self, nodes: TraceNodes) -> None:
        n = len(nodes)
        width = max(1, int(nodes.gpus.max()) if n else 1)
        self.nodes = nodes
        self.cpu_total = nodes.cpu_milli.copy()
        self.gpu_count = nodes.gpus.copy()
        self.cpu_free = nodes.cpu_milli.copy()
        self.mem_free = nodes.memory_mib.copy()
        slots = np.arange(width)[None, :] < nodes.gpus[:, None]
        self.free: IntArray = np.where(slots, MILLI, 0).astype(np.int64)
        # Node model index, with GPU-less nodes mapped to the extra last column.
        self.model_col = np.where(nodes.model_idx >= 0, nodes.model_idx, len(nodes.models))
        self.full = nodes.gpus.copy()
        self.max_free = np.where(nodes.gpus > 0, MILLI, 0).astype(np.int64)
        self.version = np.zeros(n, dtype=np.int64)
        self.allocated_milli = 0

    def __len__(self) -> int:
        return len(self.cpu_free)

    @property
    def gpu_free_total(self) -> IntArray:
        return self.free.sum(axis=1)  # type: ignore[no-any-return]

    def feasible(self, task: SimTask) -> BoolArray:
        """Nodes with the CPU, host memory and GPUs (of an accepted model) the task needs."""
        ok = (self.cpu_free >= task.cpu) & (self.mem_free >= task.mem) & task.model_ok[self.model_col]
        if task.num_gpu == 0:
            return ok
        if task.is_share:
            return ok & (self.max_free >= task.milli)
        return ok & (self.full >= task.num_gpu)

    def whole_gpus(self, node: int, count: int) -> list[int]:
        """The lowest-index entirely free GPUs of ``node``."""
        return [int(g) for g in np.flatnonzero(self.free[node] == MILLI)[:count]]

    def apply(self, node: int, gpus: list[int], task: SimTask) -> None:
        self.cpu_free[node] -= task.cpu
        self.mem_free[node] -= task.mem
        for g in gpus:
            self.free[node, g] -= task.milli
        row = self.free[node]
        self.full[node] = int((row == MILLI).sum())
        self.max_free[node] = int(row.max())
        self.version[node] += 1
        self.allocated_milli += task.request_milli
