"""The one evaluator of the rule table, in the forms its consumers ask.

* ``passing``: the rows that pass every given rule (the engine's filter);
* ``first_failure``: each row's first failing rule (refusals, node verdicts);
* ``failures``: every rule one device fails (a single device's report);
* ``shortfall``: how much of each limited resource a row misses (eviction
  planning, the queues' prefilter, the DRA counters);
* ``evaluate``: one part on one device, start to finish (the allocator's re-check):
  ``MATCH`` and ``STATE`` rows, then the vendor's rounding, then the ``FIT`` rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

import numpy as np

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import ReasonCode
from hami_devices.models import DeviceInfo, Grant, RequestPart
from hami_devices.rounding import GrantRule
from hami_devices.rules.columns import BoolArray, DeviceView, IntArray, Rows, one_device
from hami_devices.rules.demand import Demand, plan
from hami_devices.rules.table import FIT_RULES, GRANT_RULES, MATCH_RULES, STATE_RULES, Rule

V = TypeVar("V", bound=Rows)
A = TypeVar("A")


def passing(rules: Sequence[Rule[V, A]], view: V, arg: A, out: BoolArray | None = None) -> BoolArray:
    """Rows of ``view`` that pass every rule of ``rules`` (``out``: a mask to narrow in place)."""
    ok = np.ones(len(view), dtype=bool) if out is None else out
    for rule in rules:
        rule.narrow(view, arg, ok)
    return ok


def first_failure(
    rules: Sequence[Rule[V, A]], view: V, arg: A, codes: IntArray, index: Mapping[ReasonCode, int]
) -> None:
    """Give each row of ``codes`` still at -1 the ``index`` of the code of the first rule of ``rules`` it fails.

    A rule with ``codes`` (the ``ROUND`` row) reports its judge's finer code where it gave one (positions in
    ``DEVICE_CODES``, which ``index`` must number the same way).
    """
    for rule in rules:
        open_rows = codes < 0
        if not open_rows.any():
            return
        bad = rule.fails(view, arg)
        if bad is None:
            continue
        hit = bad & open_rows
        codes[hit] = index[rule.code]
        finer = None if rule.codes is None else rule.codes(arg)
        if finer is not None:
            own = finer[hit]
            codes[hit] = np.where(own >= 0, own, index[rule.code])


def failures(rules: Sequence[Rule[V, A]], view: V, arg: A) -> list[ReasonCode]:
    """Every rule of ``rules`` the one row of ``view`` fails, in table order."""
    out: list[ReasonCode] = []
    for rule in rules:
        bad = rule.fails(view, arg)
        if bad is not None and bool(bad[0]):
            out.append(rule.code)
    return out


def shortfall(rules: Sequence[Rule[V, A]], view: V, arg: A) -> dict[ReasonCode, tuple[str, IntArray]]:
    """Per limited rule of ``rules``: its resource and how much each row misses (0 or less: enough)."""
    return {r.code: (r.limit.resource, r.limit.short(view, arg)) for r in rules if r.limit is not None}


def fits_after(rules: Sequence[Rule[V, A]], view: V, arg: A, back: Mapping[str, IntArray]) -> BoolArray:
    """Rows where every limited rule of ``rules`` would pass once ``back`` (per resource) were released."""
    ok = np.ones(len(view), dtype=bool)
    for resource, short in shortfall(rules, view, arg).values():
        ok &= short <= back.get(resource, 0)
    return ok


def check_grant(view: DeviceView, grant: Grant) -> list[ReasonCode]:
    """Every rule a given grant breaks on the one device of ``view`` (its usage and capacity)."""
    return failures(GRANT_RULES, view, Demand.of_grants([grant]))


def evaluate(
    info: DeviceInfo, rule: GrantRule, part: RequestPart, part_index: int, usage: DeviceUsage
) -> Grant | list[ReasonCode]:
    """What ``part`` gets on this device now, or every reason it gets nothing.

    The allocator commits only what this says; the scheduling engine runs the same
    rows over its arrays.
    """
    view = one_device(info, usage, rule.memory_factor, rule.core_capacity)
    problems = failures(MATCH_RULES, view, part) + failures(STATE_RULES, view, None)
    if problems:
        return problems
    planned = plan(rule, info, part, part_index, usage)
    if isinstance(planned, ReasonCode):
        return [planned]
    return failures(FIT_RULES, view, Demand.of_grants([planned])) or planned

