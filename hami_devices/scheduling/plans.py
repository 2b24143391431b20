"""What each device would give a part, kept between decisions: the rules' inputs as arrays.

The ``FIT`` rules need the part's demand on every device (``rules.Demand``):
the plain share where the device's rule gives one, else what the vendor's
rounding (``rules.plan``) gives for the device's current usage.  Rounding is
Python, device by device, so its answers are kept per device row and
re-asked only for rows whose usage changed since (their ``stamp`` moved).
The ``MATCH`` rows depend only on device facts and the part's selectors, so
their mask is kept per cluster layout; so is the plain memory need.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import ReasonCode
from hami_devices.models import Grant, Health, RequestPart
from hami_devices.rounding import GrantRule
from hami_devices.rules import (
    DEVICE_CODES,
    FIT_RULES,
    MATCH_RULES,
    STATE_RULES,
    Demand,
    first_failure,
    memory_need,
    passing,
    plan,
)
from hami_devices.rules.columns import BoolArray, IntArray
from hami_devices.scheduling.tables import Tables

_CODE_POSITION = {code: i for i, code in enumerate(DEVICE_CODES)}

PLAN_MEMOS = 256
"""Parts whose per-row plans ``plan_rows`` keeps as arrays (least recently used dropped first)."""
MASKS = 1024
"""Part selectors (and memory forms) whose masks are kept per layout (least recently used dropped first)."""


@dataclass
class PlanMemo:
    """``Plans.planned`` for one part over many rows, as arrays indexed by device row.

    An entry is current when ``stamp[row] == cluster.stamp[row]``; ``plan_rows`` makes the
    rows it is given current.  ``ok``: the rounding gave a grant; then ``memory``, ``cores``,
    ``exclusive``, ``context`` and ``grants[row]`` are the grant, else ``first[row]`` is the rounding's code, as its
    position in ``rules.DEVICE_CODES`` (-1: a code the table does not list).
    """

    layout: int
    stamp: IntArray
    ok: BoolArray
    memory: IntArray
    cores: IntArray
    exclusive: BoolArray
    first: IntArray
    context: IntArray
    grants: dict[int, Grant] = field(default_factory=dict)

    @classmethod
    def empty(cls, layout: int, size: int) -> PlanMemo:
        return cls(layout, np.full(size, -1, dtype=np.int64), np.zeros(size, dtype=bool),
                   np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64), np.zeros(size, dtype=bool),
                   np.full(size, -1, dtype=np.int64), np.zeros(size, dtype=np.int64))


class Plans(Tables):
    """The part-dependent inputs of the rules over the cluster's rows, cached."""

    def __init__(
        self, memory_overcommit: float = 1.0, rules: Mapping[str, GrantRule] | None = None, *, core_capacity: int = 100
    ) -> None:
        super().__init__(memory_overcommit, rules, core_capacity=core_capacity)
        self._plans: dict[tuple[int, str, int], Grant | ReasonCode] = {}  # (row stamp, part, index) -> rounding
        self._plan_memos: OrderedDict[tuple[str, int], PlanMemo] = OrderedDict()
        self._masks: OrderedDict[tuple[Any, ...], IntArray | BoolArray] = OrderedDict()
        self._masks_layout = (-1, -1)
        self._empty: OrderedDict[tuple[str, int], np.ndarray[Any, np.dtype[np.int8]]] = OrderedDict()
        self._empty_layout = (-1, -1)

    # ------------------------------------------------------------------ per layout
    def _kept(self, key: tuple[Any, ...], build: Any) -> Any:
        layout = (self.layout_version, self.size)
        if self._masks_layout != layout:
            self._masks.clear()
            self._masks_layout = layout
        value = self._masks.get(key)
        if value is None:
            value = self._masks[key] = build()
            while len(self._masks) > MASKS:
                self._masks.popitem(last=False)
        else:
            self._masks.move_to_end(key)
        return value

    def match_ok(self, part: RequestPart) -> BoolArray:
        """Rows [0, size) whose facts pass every ``MATCH`` rule for ``part`` (do not modify the result)."""
        key = ("match", tuple(part.vendors), tuple(part.exclude_vendors), tuple(part.models),
               tuple(part.exclude_models), tuple(part.uuids), tuple(part.exclude_uuids), part.precision,
               part.numa_node)
        mask: BoolArray = self._kept(key, lambda: passing(MATCH_RULES, self.view(), part))
        return mask

    def match_codes(self, part: RequestPart, index: Mapping[ReasonCode, int]) -> IntArray:
        """Per row [0, size): the ``index`` of the first ``MATCH`` rule it fails for ``part``, -1 where it passes
        them all (do not modify the result)."""
        key = ("match-codes", tuple(part.vendors), tuple(part.exclude_vendors), tuple(part.models),
               tuple(part.exclude_models), tuple(part.uuids), tuple(part.exclude_uuids), part.precision,
               part.numa_node)

        def build() -> IntArray:
            codes = np.full(self.size, -1, dtype=np.int64)
            first_failure(MATCH_RULES, self.view(), part, codes, index)
            return codes

        codes: IntArray = self._kept(key, build)
        return codes

    def memory_need(self, part: RequestPart) -> IntArray:
        """MiB the part takes as a plain share on each row [0, size) (do not modify the result)."""
        key = ("memory", part.memory_mib, part.memory_percent)
        need: IntArray = self._kept(key, lambda: memory_need(part, self.mem_total[: self.size]))
        return need

    # ------------------------------------------------------------------ rounding
    def planned(self, row: int, part: RequestPart, part_key: str, part_index: int) -> Grant | ReasonCode:
        """The rounding of ``part`` on ``row`` for the row's current usage (``rules.plan``), kept per row state."""
        key = (int(self.stamp[row]), part_key, part_index)
        hit = self._plans.get(key)
        if hit is None:
            if len(self._plans) > 1 << 16:
                self._plans.clear()
            hit = self._plans[key] = plan(self.rule_of(row), self.info(row), part, part_index, self.usage[row])
        return hit

    def plan_rows(self, rows: IntArray, part: RequestPart, part_key: str, part_index: int) -> PlanMemo:
        """``planned`` for each of ``rows``, as arrays: only rows whose stamp moved since the part was last
        planned there are asked again, so a decision over thousands of rule-planned devices costs a few
        vector operations plus the devices that changed."""
        key = (part_key, part_index)
        memo = self._plan_memos.get(key)
        if memo is None or memo.layout != self.layout_version or memo.stamp.size < self._cap:
            # A new layout may put another device on a row: nothing remembered for it holds.
            memo = self._plan_memos[key] = PlanMemo.empty(self.layout_version, self._cap)
            while len(self._plan_memos) > PLAN_MEMOS:
                self._plan_memos.popitem(last=False)
        else:
            self._plan_memos.move_to_end(key)
        stale = rows[memo.stamp[rows] != self.stamp[rows]]
        for row in stale.tolist():
            result = self.planned(row, part, part_key, part_index)
            memo.stamp[row] = self.stamp[row]
            if isinstance(result, Grant):
                memo.ok[row] = True
                memo.memory[row] = result.memory_mib
                memo.cores[row] = result.cores
                memo.exclusive[row] = result.exclusive
                memo.context[row] = result.context_mib
                memo.grants[row] = result
            else:
                memo.ok[row] = False
                memo.first[row] = _CODE_POSITION.get(result, -1)
                memo.grants.pop(row, None)
        return memo

    def demand(self, part: RequestPart, part_index: int, asked: IntArray) -> tuple[Demand, dict[int, Grant]]:
        """The part's demand on every row [0, size), with ``asked`` (rows whose rule rounds the part: every
        row for a part naming a partition, else the rows that are not ``plain``) rounded now.

        Rows neither plain nor asked carry the plain share; the caller only reads the rows it asked for
        or the plain ones.  Also returns the rounded grants by row.
        """
        size = self.size
        memory = self.memory_need(part) if part.partition is None else np.zeros(size, dtype=np.int64)
        refused = np.zeros(size, dtype=bool) if part.partition is None else np.ones(size, dtype=bool)
        plain = Demand.plain(part, memory, self.context_mib[:size])
        if asked.size == 0:
            plain.refused = refused
            return plain, {}
        memo = self.plan_rows(asked, part, part.model_dump_json(), part_index)
        memory = memory.copy()
        cores = np.full(size, part.cores, dtype=np.int64)
        exclusive = np.full(size, part.exclusive, dtype=bool)
        context = np.zeros(size, dtype=np.int64) + plain.context
        memory[asked] = memo.memory[asked]
        cores[asked] = memo.cores[asked]
        exclusive[asked] = memo.exclusive[asked]
        context[asked] = memo.context[asked]
        refused[asked] = ~memo.ok[asked]
        return Demand(memory, cores, exclusive, refused, memo.first[:size], context), memo.grants

    # ------------------------------------------------------------------ as if empty
    def fits_empty(self, part: RequestPart, part_index: int, within: BoolArray | None = None) -> BoolArray:
        """Rows [0, size) (of ``within``) that could take ``part`` if nothing were allocated on them and every
        device were healthy: the same rules, over the columns as they would then be."""
        size = self.size
        on = self.alive[:size] & self.match_ok(part)
        if within is not None:
            on &= within[:size]
        empty = self.view(slice(0, size)).as_if_empty()
        passing(STATE_RULES, empty, None, out=on)
        if part.partition is None:
            plain = on & self.plain[:size]
            passing(FIT_RULES, empty, Demand.plain(part, self.memory_need(part), self.context_mib[:size]), out=plain)
            asked = np.flatnonzero(on & ~self.plain[:size])
        else:
            plain = np.zeros(size, dtype=bool)
            asked = np.flatnonzero(on)
        if asked.size:
            known = self._empty_verdicts(part, part_index)
            self._judge_empty(asked[known[asked] < 0], part, part_index, known)
            plain[asked] = known[asked] == 1
        return plain

    def _empty_verdicts(self, part: RequestPart, part_index: int) -> np.ndarray[Any, np.dtype[np.int8]]:
        """Per row: -1 not asked yet, else whether the part fits the emptied row (kept per layout)."""
        layout = (self.layout_version, self.size)
        if self._empty_layout != layout:
            self._empty.clear()
            self._empty_layout = layout
        key = (part.model_dump_json(), part_index)
        known = self._empty.get(key)
        if known is None:
            known = self._empty[key] = np.full(self.size, -1, dtype=np.int8)
            while len(self._empty) > MASKS:
                self._empty.popitem(last=False)
        else:
            self._empty.move_to_end(key)
        return known

    def _judge_empty(self, rows: IntArray, part: RequestPart, part_index: int,
                     known: np.ndarray[Any, np.dtype[np.int8]]) -> None:
        """Set ``known`` at ``rows``: whether the part fits each emptied row (the vendor's rounding on an empty
        device, then the fit rules over all the rounded rows at once)."""
        granted: list[int] = []
        grants: list[Grant] = []
        for row in rows.tolist():
            info = self.info(row)
            if not info.healthy:
                info = info.model_copy(update={"health": Health.HEALTHY})
            planned = plan(self.rule_of(row), info, part, part_index, DeviceUsage())
            if isinstance(planned, ReasonCode):
                known[row] = 0
            else:
                granted.append(row)
                grants.append(planned)
        if granted:
            at = np.array(granted, dtype=np.int64)
            known[at] = passing(FIT_RULES, self.view(at).as_if_empty(), Demand.of_grants(grants))
