"""The cluster's nodes as columns: host CPU and memory, whether schedulable, labels, taints, name order.

One row per node, appended as nodes join; a node that leaves keeps its row, named
"" and unschedulable, so device columns that point at node rows stay valid.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hami_devices.errors import InvalidRequest
from hami_devices.models import ACCELERATOR_TAINT, Taint
from hami_devices.rules import NodeView
from hami_devices.rules.columns import BoolArray, IntArray


@dataclass
class NodeState:
    name: str
    cpu_milli: int
    memory_mib: int
    labels: dict[str, str]
    devices: list[int] = field(default_factory=list)  # device rows
    cpu_used: int = 0
    memory_used: int = 0
    schedulable: bool = True
    taints: list[Taint] = field(default_factory=list)


class NodeTable:
    """The node rows; ``Tables`` adds the devices on them."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}
        self._node_names: list[str] = []  # node row -> name ("" when removed)
        self._node_index: dict[str, int] = {}
        self.node_cpu_free = np.zeros(0, dtype=np.int64)
        self.node_mem_free = np.zeros(0, dtype=np.int64)
        self.node_cpu_total = np.zeros(0, dtype=np.int64)
        self.node_mem_total = np.zeros(0, dtype=np.int64)
        self.node_ok = np.zeros(0, dtype=bool)
        # Bumped whenever anything about a node (its devices' usage or health, its host usage,
        # whether it is schedulable) changes, so per-node work can be cached between decisions.
        self.node_version = np.zeros(0, dtype=np.int64)
        self._last_rows: tuple[tuple[Any, ...], IntArray] | None = None
        self._name_rank: IntArray | None = None  # node row -> rank of its name (tie-breaks)
        self._label_columns: dict[str, tuple[dict[str, int], IntArray]] = {}  # label key -> value ids per node
        self._taint_columns: tuple[tuple[int, int], list[tuple[Taint, BoolArray]]] | None = None
        self._taint_accelerators = False
        self.version = 0

    def _refresh_node(self, node_name: str) -> None:
        """The node's devices must be judged again (``Tables`` overrides)."""

    @property
    def node_cpu_used(self) -> IntArray:
        return self.node_cpu_total - self.node_cpu_free

    @property
    def node_mem_used(self) -> IntArray:
        return self.node_mem_total - self.node_mem_free

    def node_view(self, at: IntArray | slice | None = None) -> NodeView:
        """The node columns at node rows ``at`` (default: every node row), as the node rules read them."""
        at = slice(0, len(self._node_names)) if at is None else at
        total_cpu, total_mem = self.node_cpu_total[at], self.node_mem_total[at]
        return NodeView(
            at=at, names=self, node_ok=self.node_ok[at],
            node_cpu_used=total_cpu - self.node_cpu_free[at], node_cpu_total=total_cpu,
            node_mem_used=total_mem - self.node_mem_free[at], node_mem_total=total_mem,
        )

    # ------------------------------------------------------------------ nodes
    def _add_node_row(
        self,
        name: str,
        cpu_milli: int,
        memory_mib: int,
        labels: Mapping[str, str] | None,
        taints: Sequence[Taint] = (),
    ) -> None:
        if name in self.nodes:
            raise InvalidRequest("node", f"node {name!r} already in the cluster")
        if cpu_milli < 0 or memory_mib < 0:
            raise InvalidRequest("node", f"node {name!r}: negative CPU or memory")
        row = len(self._node_names)
        self._node_names.append(name)
        self._node_index[name] = row
        self.node_cpu_free = np.append(self.node_cpu_free, cpu_milli)
        self.node_mem_free = np.append(self.node_mem_free, memory_mib)
        self.node_cpu_total = np.append(self.node_cpu_total, cpu_milli)
        self.node_mem_total = np.append(self.node_mem_total, memory_mib)
        self.node_ok = np.append(self.node_ok, True)
        self.node_version = np.append(self.node_version, 0)
        self.nodes[name] = NodeState(name, cpu_milli, memory_mib, dict(labels or {}), taints=list(taints))
        self._name_rank = None
        self._label_columns.clear()
        self._taint_columns = None

    def _drop_node_row(self, name: str) -> None:
        row = self._node_index.pop(name)
        self._node_names[row] = ""
        self.node_ok[row] = False
        self.node_version[row] += 1
        self._name_rank = None
        self._taint_columns = None
        del self.nodes[name]

    @property
    def taint_accelerators(self) -> bool:
        """Every node with devices carries ``ACCELERATOR_TAINT`` (``keep-cpu-tasks-off-accelerators``)."""
        return self._taint_accelerators

    @taint_accelerators.setter
    def taint_accelerators(self, value: bool) -> None:
        self._taint_accelerators = value
        self._taint_columns = None
        self.version += 1

    def set_taints(self, name: str, taints: Sequence[Taint]) -> None:
        """Replace the node's taints (new placements must tolerate them; what runs there stays)."""
        self._node(name).taints = list(taints)
        self._taint_columns = None
        self.node_version[self._node_index[name]] += 1
        self.version += 1

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        self._node(name).schedulable = schedulable
        self.node_ok[self._node_index[name]] = schedulable
        self.node_version[self._node_index[name]] += 1
        self._refresh_node(name)
        self.version += 1

    def live_node_rows(self) -> IntArray:
        """The rows of the nodes in the cluster, in the order they joined."""
        return np.fromiter(self._node_index.values(), dtype=np.int64, count=len(self._node_index))

    def node_row(self, name: str) -> int:
        return self._node_index[name]

    def node_rows(self, names: Sequence[str]) -> IntArray:
        """The row of each named node; -1 for a name the cluster does not know.

        The last answer is kept: schedulers ask about the same list of nodes decision after decision.
        Rows only change when nodes come or go, which changes one of the two lengths in the key.
        """
        key = (tuple(names), len(self._node_names), len(self.nodes))
        if self._last_rows is not None and self._last_rows[0] == key:
            return self._last_rows[1]
        rows = np.fromiter(map(self._node_index.get, names, itertools.repeat(-1)), dtype=np.int64, count=len(names))
        rows.flags.writeable = False  # shared with later callers
        self._last_rows = (key, rows)
        return rows

    def node_name(self, row: int) -> str:
        return self._node_names[row]

    @property
    def node_names(self) -> list[str]:
        return self._node_names

    def _node(self, name: str) -> NodeState:
        try:
            return self.nodes[name]
        except KeyError:
            raise InvalidRequest("node", f"unknown node {name!r}") from None

    def name_rank(self) -> IntArray:
        """Rank of each node row's name in sorted order (removed rows rank last)."""
        if self._name_rank is None or len(self._name_rank) != len(self._node_names):
            order = sorted(range(len(self._node_names)), key=lambda i: (self._node_names[i] == "", self._node_names[i]))
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            self._name_rank = rank
        return self._name_rank

    def label_matches(self, key: str, value: str) -> BoolArray:
        """Per node row: does the node carry label ``key`` with ``value``?  (An array per key, kept.)"""
        column = self._label_columns.get(key)
        if column is None:
            ids: dict[str, int] = {}
            values = np.full(len(self._node_names), -1, dtype=np.int64)
            for row, name in enumerate(self._node_names):
                state = self.nodes.get(name)
                if state is not None and key in state.labels:
                    values[row] = ids.setdefault(state.labels[key], len(ids))
            column = self._label_columns[key] = (ids, values)
        ids, values = column
        return values == ids.get(value, -2)  # type: ignore[no-any-return]


    def _nodes_with_devices(self) -> BoolArray:
        """Per node row: the node has devices (``Tables`` knows; a table of nodes alone has none)."""
        return np.zeros(len(self._node_names), dtype=bool)

    def _devices_key(self) -> int:
        """Changes whenever which nodes have devices may have changed (``Tables``: its layout version)."""
        return 0

    def node_taints(self) -> list[tuple[Taint, BoolArray]]:
        """Each distinct taint in the cluster, with the node rows that carry it (kept until nodes, their
        taints or the device layout change)."""
        key = (len(self._node_names), self._devices_key())
        if self._taint_columns is not None and self._taint_columns[0] == key:
            return self._taint_columns[1]
        columns: dict[tuple[str, str, str], tuple[Taint, BoolArray]] = {}
        for row, name in enumerate(self._node_names):
            state = self.nodes.get(name)
            for taint in state.taints if state is not None else ():
                mark = (taint.key, taint.value, taint.effect)
                if mark not in columns:
                    columns[mark] = (taint, np.zeros(len(self._node_names), dtype=bool))
                columns[mark][1][row] = True
        if self._taint_accelerators:
            accel = Taint(key=ACCELERATOR_TAINT)
            mark = (accel.key, accel.value, accel.effect)
            carried = self._nodes_with_devices()
            if mark in columns:
                columns[mark][1][:] |= carried
            else:
                columns[mark] = (accel, carried)
        found = [c for c in columns.values() if c[1].any()]
        self._taint_columns = (key, found)
        return found
