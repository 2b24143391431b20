"""The engine's row-array shortcuts say exactly what their slow forms say.

- ``Engine.try_place(request, candidates=masks)`` places as the same request with each part's
  ``uuids`` listing the masked devices;
- ``ClusterState.plan_rows`` holds, for every row it was asked about, what ``planned`` says now,
  through bookings, releases, health changes and devices coming and going;
- ``ClusterState.node_rows`` maps names to rows (-1 unknown) and notices nodes coming and going.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hami_devices as hd
from hami_devices.config import HamiConfig
from hami_devices.inventory import parse_inventory
from hami_devices.models import Grant, Health, RequestPart, ResourceRequest
from hami_devices.registry import load_vendors
from hami_devices.rules import DEVICE_CODES, plan
from hami_devices.scheduler import ClusterState, Engine, Placement

# Plain shares (T4, L4) beside devices whose rule plans each grant: MIG-capable A30/A100 with MIG
# on, Ascend vNPU templates, Cambricon sMLU.
INVENTORY = parse_inventory({"nodes": [
    {"name": "a", "cpu_milli": 8000, "memory_mib": 65536,
     "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}, {"vendor": "nvidia", "model": "A30", "count": 2}]},
    {"name": "b", "cpu_milli": 16000, "memory_mib": 65536,
     "devices": [{"vendor": "ascend", "model": "910B3", "count": 4, "link": "hccs"}]},
    {"name": "c", "cpu_milli": 16000, "memory_mib": 65536,
     "devices": [{"vendor": "nvidia", "model": "A100-40GB", "count": 2, "link": "nvlink"},
                 {"vendor": "cambricon", "model": "MLU370-X8", "count": 2}]},
    {"name": "d", "cpu_milli": 32000, "memory_mib": 131072,
     "devices": [{"vendor": "nvidia", "model": "L4", "count": 4}]},
]})
CONFIG = HamiConfig.model_validate({"device-plugin": {"mig-mode": "flexible"}})
REGISTRY = load_vendors(config=CONFIG)

part_specs = st.fixed_dictionaries({
    "count": st.integers(1, 2),
    "memory_mib": st.sampled_from([1000, 4000, 12000, 30000]),
    "cores": st.sampled_from([0, 25, 100]),
    "models": st.sampled_from([[], ["T4"], ["A30", "A100-40GB"], ["L4"], ["Ascend910B3"], ["MLU370-X8"]]),
    "partition": st.sampled_from([None, None, "auto"]),
})
requests = st.builds(
    lambda ps, same: ResourceRequest(parts=[RequestPart(**p) for p in ps], same_node=same),
    st.lists(part_specs, min_size=1, max_size=2), st.booleans(),
)


def engine() -> Engine:
    return hd.build_engine(INVENTORY, CONFIG, registry=REGISTRY)


def filled(fill: list[ResourceRequest]) -> Engine:
    out = engine()
    for r in fill:
        placed = out.try_place(r)
        if placed is not None:
            out.assume(placed)
    return out


def summary(placement: Placement | None) -> Any:
    if placement is None:
        return None
    return placement.node, [g.model_dump() for g in placement.grants], placement.score, placement.breakdown


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fill=st.lists(requests, max_size=6), request=requests, data=st.data())
def test_candidate_masks_place_as_uuid_lists(fill: list[ResourceRequest], request: ResourceRequest,
                                             data: st.DataObject) -> None:
    e = filled(fill)
    c = e.cluster
    uuids = [c.info(r).uuid for r in c.live_rows().tolist()]
    masks, listed = [], []
    for _ in request.parts:
        chosen = sorted(data.draw(st.sets(st.sampled_from(uuids), min_size=1)))
        mask = np.zeros(c.size, dtype=bool)
        mask[[c.uuid_index[u] for u in chosen]] = True
        masks.append(mask)
        listed.append(chosen)
    with_uuids = request.model_copy(
        update={"parts": [p.model_copy(update={"uuids": u}) for p, u in zip(request.parts, listed, strict=True)]})
    assert summary(e.try_place(request, candidates=masks)) == summary(e.try_place(with_uuids))
    # A mask and a uuid list together: the devices both allow.
    both = e.try_place(with_uuids, candidates=[np.ones(c.size, dtype=bool)] * len(request.parts))
    assert summary(both) == summary(e.try_place(with_uuids))


def test_candidate_masks_name_the_field_when_miscounted() -> None:
    e = engine()
    with pytest.raises(hd.InvalidRequest, match="candidates"):
        e.try_place(ResourceRequest.single(memory_mib=1000), candidates=[])


def test_no_candidate_means_no_placement() -> None:
    e = engine()
    nothing = np.zeros(e.cluster.size, dtype=bool)
    assert e.try_place(ResourceRequest.single(memory_mib=1000), candidates=[nothing]) is None
    assert e.try_place(ResourceRequest.single(memory_mib=1000), candidates=[None]) is not None


def expected(c: ClusterState, row: int, part: RequestPart, index: int) -> Grant | hd.ReasonCode:
    """What the rounding says now, computed afresh (``planned`` with nothing remembered)."""
    return plan(c.rule_of(row), c.info(row), part, index, c.usage[row])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(["book", "forget", "sick", "well", "replace"]), requests),
                      max_size=10),
       asked=st.lists(part_specs, min_size=1, max_size=3))
def test_plan_rows_holds_what_planned_says(steps: list[tuple[str, ResourceRequest]], asked: list[Any]) -> None:
    e = engine()
    c = e.cluster
    parts = [RequestPart(**spec) for spec in asked]
    for action, request in steps:
        # Ask before every change, so that later answers must come from refreshed entries.
        for i, part in enumerate(parts):
            c.plan_rows(c.live_rows(), part, part.model_dump_json(), i)
        if action == "book":
            placed = e.try_place(request)
            if placed is not None:
                e.assume(placed)
        elif action == "forget" and c.bookings:
            c.forget(next(iter(c.bookings)))
        elif action in ("sick", "well"):
            uuid = c.info(int(c.live_rows()[len(c.bookings) % c.live_rows().size])).uuid
            c.set_health(uuid, Health.UNHEALTHY if action == "sick" else Health.HEALTHY)
        elif action == "replace":  # a node leaves and comes back: its rows are reused by new devices
            spec = INVENTORY.nodes[len(c.bookings) % len(INVENTORY.nodes)]
            c.remove_node(spec.name)
            c.add_node_spec(spec)
    rows = c.live_rows()
    for i, part in enumerate(parts):
        memo = c.plan_rows(rows, part, part.model_dump_json(), i)
        for row in rows.tolist():
            want = expected(c, row, part, i)
            assert memo.ok[row] == isinstance(want, Grant)
            if isinstance(want, Grant):
                assert memo.grants[row] == want
                assert (memo.memory[row], memo.cores[row]) == (want.memory_mib, want.cores)
            else:
                assert DEVICE_CODES[memo.first[row]] == want


def test_node_rows() -> None:
    c = engine().cluster
    rows = c.node_rows(["d", "zz", "a"])
    assert rows.tolist() == [c.node_row("d"), -1, c.node_row("a")]
    assert not rows.flags.writeable
    c.remove_node("a")
    assert c.node_rows(["d", "zz", "a"]).tolist() == [c.node_row("d"), -1, -1]
    c.add_node_spec(INVENTORY.nodes[0])
    assert c.node_rows(["d", "zz", "a"]).tolist() == [c.node_row("d"), -1, c.node_row("a")]
