"""Claim allocation: the engine places, CEL and constraints narrow, results are schema-valid and exact."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import yaml

from hami_devices.errors import InsufficientResources, InvalidRequest
from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.kubernetes.dra.validate import validate
from hami_devices.models import RequestPart, ResourceRequest

from .conftest import DRA, claim, exactly


def _results(allocation: dict[str, Any]) -> list[dict[str, Any]]:
    return list(allocation["devices"]["results"])


def _used(allocator: DraAllocator) -> tuple[int, int]:
    c = allocator.engine.cluster
    return int(c.mem_used[: c.size].sum()), int(c.cores_used[: c.size].sum())


def test_mixed_tier_claim_allocates_on_one_node(allocator: DraAllocator) -> None:
    raw = yaml.safe_load((DRA / "mixed-tier-claim.yaml").read_text())
    allocated = allocator.allocated(raw)
    assert validate(allocated) == "1.34"
    results = _results(allocated["status"]["allocation"])
    assert [r["request"] for r in results] == ["t4", "a30", "h100"]
    assert {r["pool"] for r in results} == {"tiers-a"}
    models = {r["request"]: allocator.catalog.devices[allocator.catalog.index[(r["driver"], r["pool"], r["device"])]]
              .own("model") for r in results}
    assert models == {"t4": "T4", "a30": "A30", "h100": "H100"}
    assert results[0]["consumedCapacity"] == {"memory": "4096Mi", "cores": "30"}
    assert all(r["shareID"] for r in results) and len({r["shareID"] for r in results}) == 3
    assert allocator.allocate(raw) == allocated["status"]["allocation"]  # a retry gets the same result


def test_mixed_tier_is_all_or_nothing(allocator: DraAllocator) -> None:
    before = _used(allocator)
    too_big = claim("greedy", [
        exactly("t4", selectors=('device.attributes["hami-devices.io"].model == "T4"',), memory="4Gi", cores="10"),
        exactly("h100", selectors=('device.attributes["hami-devices.io"].model == "H100"',), memory="90Gi",
                cores="10"),
    ])
    with pytest.raises(InsufficientResources, match="default/greedy"):
        allocator.allocate(too_big)
    assert _used(allocator) == before and not allocator.engine.cluster.bookings


def test_mlu_plus_t4_claim(allocator: DraAllocator) -> None:
    raw = yaml.safe_load((DRA / "mlu-t4-claim.yaml").read_text())
    allocated = allocator.allocated(raw)
    validate(allocated)
    results = _results(allocated["status"]["allocation"])
    assert {r["pool"] for r in results} == {"edge-mlu"}
    assert results[0]["consumedCapacity"]["memory"] == "3072Mi"  # sMLU rounds to 256 MiB units


def test_the_engine_decides_where(allocator: DraAllocator) -> None:
    """The allocation is exactly the engine's placement of the request the claim narrows to."""
    raw = claim("one", [exactly("g", memory="6Gi", cores="20",
                                selectors=('device.attributes["hami-devices.io"].vendor == "nvidia"',))])
    uuids = sorted(str(allocator.catalog.devices[i].own("uuid")) for i in allocator.catalog.physical()
                   if allocator.catalog.devices[i].own("vendor") == "nvidia")
    expected = allocator.engine.place(ResourceRequest(parts=[RequestPart(memory_mib=6144, cores=20, uuids=uuids)]))
    result = _results(allocator.allocate(raw))[0]
    row = allocator.catalog.index[(result["driver"], result["pool"], result["device"])]
    assert allocator.catalog.devices[row].own("uuid") == expected.grants[0].uuid


def test_hami_policy_annotations_on_a_claim(allocator: DraAllocator) -> None:
    """Two T4 nodes (tiers-a: two T4s, edge-mlu: one).  After a first share, binpack puts the next on the same
    card; ``hami.io/node-scheduler-policy: spread`` sends it to the other node's empty T4 instead."""
    pick = ('device.attributes["hami-devices.io"].model == "T4"',)

    def share(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
        raw = claim(name, [exactly("g", selectors=pick, memory="2Gi", cores="10")])
        if annotations:
            raw["metadata"]["annotations"] = annotations
        result = _results(allocator.allocate(raw))[0]
        return {"pool": result["pool"], "device": result["device"]}

    first = share("first")
    assert share("packed") == first  # the engine's binpack
    spread = share("spread", {"hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "binpack"})
    assert spread["pool"] != first["pool"]
    with pytest.raises(InvalidRequest, match="no-such"):
        share("bad", {"hami.io/gpu-scheduler-policy": "no-such"})


def test_shares_fill_a_card_then_refuse(allocator: DraAllocator) -> None:
    pick = ('device.attributes["hami-devices.io"].model == "A30"',)
    for i in range(4):  # two A30s x two halves
        allocator.allocate(claim(f"half{i}", [exactly("g", selectors=pick, memory="12Gi", cores="50")]))
    with pytest.raises(InsufficientResources):
        allocator.allocate(claim("one-more", [exactly("g", selectors=pick, memory="1Gi", cores="1")]))
    allocator.release("uid-half0")
    allocator.allocate(claim("after-release", [exactly("g", selectors=pick, memory="1Gi", cores="1")]))


def test_no_capacity_means_the_whole_card(allocator: DraAllocator) -> None:
    result = _results(allocator.allocate(claim("whole", [exactly("g", selectors=(
        'device.attributes["hami-devices.io"].model == "H100"',))])))[0]
    row = allocator.catalog.index[(result["driver"], result["pool"], result["device"])]
    whole = allocator.catalog.devices[row].own("memoryMiB")
    assert result["consumedCapacity"] == {"memory": f"{whole}Mi", "cores": "100"}


def test_first_available_falls_back_in_order(allocator: DraAllocator) -> None:
    raw = claim("fallback", [{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.hami-devices.io", "capacity": {"requests": {"memory": "200Gi"}}},
        {"name": "h100", "deviceClassName": "gpu.hami-devices.io", "selectors": [{"cel": {"expression":
            'device.attributes["hami-devices.io"].model == "H100"'}}], "capacity": {"requests": {"memory": "10Gi",
                                                                                             "cores": "10"}}},
    ]}])
    allocated = allocator.allocated(raw)
    validate(allocated)
    assert _results(allocated["status"]["allocation"])[0]["request"] == "gpu/h100"


def test_match_attribute_keeps_devices_on_one_numa_node(allocator: DraAllocator) -> None:
    raw = claim("numa", [exactly("a", "mig.hami-devices.io", count=1), exactly("b", "mig.hami-devices.io", count=1)],
                [{"matchAttribute": "hami-devices.io/numaNode", "requests": ["a", "b"]}])
    results = _results(allocator.allocate(raw))
    rows = [allocator.catalog.index[(r["driver"], r["pool"], r["device"])] for r in results]
    assert len({allocator.catalog.devices[r].own("numaNode") for r in rows}) == 1
    assert len({allocator.catalog.devices[r].own("uuid") for r in rows}) == 2


def test_distinct_attribute(allocator: DraAllocator) -> None:
    raw = claim("apart", [exactly("a", "mig.hami-devices.io"), exactly("b", "mig.hami-devices.io")],
                [{"distinctAttribute": "hami-devices.io/numaNode"}])
    results = _results(allocator.allocate(raw))
    rows = [allocator.catalog.index[(r["driver"], r["pool"], r["device"])] for r in results]
    assert len({allocator.catalog.devices[r].own("numaNode") for r in rows}) == 2


def test_all_mode_takes_every_matching_card_of_a_node(allocator: DraAllocator) -> None:
    raw = claim("all-t4", [exactly("t4", selectors=('device.attributes["hami-devices.io"].model == "T4"',),
                                   allocationMode="All", memory="1Gi", cores="5")])
    results = _results(allocator.allocate(raw))
    assert len(results) == 2 and {r["pool"] for r in results} == {"tiers-a"}


def test_mig_partitions_never_overlap(allocator: DraAllocator) -> None:
    taken: list[int] = []
    for i in range(8):  # four A100s, two 3g.20gb instances each
        r = _results(allocator.allocate(claim(f"mig{i}", [exactly("m", "mig.hami-devices.io", selectors=(
            'device.attributes["hami-devices.io"].partition == "3g.20gb"',))])))[0]
        assert "shareID" not in r and "consumedCapacity" not in r
        taken.append(allocator.catalog.index[(r["driver"], r["pool"], r["device"])])
    assert len(set(taken)) == 8
    for card in {allocator.catalog.devices[t].counter_set for t in taken}:
        slices = [k for t in taken if allocator.catalog.devices[t].counter_set == card
                  for k in allocator.catalog.devices[t].consumes if k.startswith("memory-slice")]
        assert len(slices) == len(set(slices))
    with pytest.raises(InsufficientResources):
        allocator.allocate(claim("mig-more", [exactly("m", "mig.hami-devices.io", selectors=(
            'device.attributes["hami-devices.io"].partition == "3g.20gb"',))]))


def test_booking_an_allocated_claim_holds_its_capacity(published: list[dict[str, Any]], allocator: DraAllocator,
                                                       config: Any, registry: Any) -> None:
    raw = yaml.safe_load((DRA / "mixed-tier-claim.yaml").read_text())
    allocated = allocator.allocated(raw)
    fresh = DraAllocator(published, config, registry=registry)
    fresh.book(allocated)
    assert _used(fresh) == _used(allocator)
    fresh.release(raw["metadata"]["uid"])
    assert _used(fresh) == (0, 0)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "r", "exactly": {"deviceClassName": "gpu.hami-devices.io", "count": 0}}, "count"),
        ({"name": "r"}, "requests[0]"),
        ({"name": "r", "exactly": {"deviceClassName": "nope.example.com"}}, "deviceClassName"),
        ({"name": "r", "exactly": {"deviceClassName": "gpu.hami-devices.io", "capacity": {"requests": {
            "memory": "lots"}}}}, "capacity.requests.memory"),
        ({"name": "r", "exactly": {"deviceClassName": "gpu.hami-devices.io", "allocationMode": "Some"}},
         "allocationMode"),
    ],
)
def test_bad_claims_name_the_field(allocator: DraAllocator, body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        allocator.allocate(claim("bad", [body]))
    assert field in info.value.field


def test_candidates_reach_the_engine_as_masks_of_exactly_the_matched_devices(allocator: DraAllocator) -> None:
    """The engine is told a request's devices as a row mask; the booking keeps them as the uuid list."""
    from hami_devices.kubernetes.dra.claims import parse_claim

    raw = yaml.safe_load((DRA / "mixed-tier-claim.yaml").read_text())
    parsed = parse_claim(raw)
    c = allocator.engine.cluster
    models = {"t4": "T4", "a30": "A30", "h100": "H100"}
    for request in parsed.requests:
        [option] = allocator.narrowing.options(parsed, request.alternatives)
        rows = sorted(c.uuid_index[u] for u in option.uuids)
        assert np.flatnonzero(option.mask).tolist() == rows
        assert option.uuids == sorted(option.rows) and not option.part.uuids
        assert {c.info(r).model for r in rows} == {models[request.name]}
        assert len(rows) == sum(1 for r in c.live_rows().tolist() if c.info(r).model == models[request.name])
    allocator.allocate(raw)
    booked = allocator.engine.cluster.bookings[raw["metadata"]["uid"]].request
    assert booked is not None
    for part, request in zip(booked.parts, parsed.requests, strict=True):
        assert part.uuids == allocator.narrowing.options(parsed, request.alternatives)[0].uuids


def test_match_attribute_no_request_pair_shares_is_a_refusal(allocator: DraAllocator) -> None:
    """Found by the official allocator's corpus: no T4 and A30 share a model, so no value of the constraint
    exists at all; that is a permanent refusal, not a crash."""
    disjoint = claim("disjoint", [
        exactly("a", selectors=('device.attributes["hami-devices.io"].model == "T4"',)),
        exactly("b", selectors=('device.attributes["hami-devices.io"].model == "A30"',)),
    ], [{"matchAttribute": "hami-devices.io/model"}])
    with pytest.raises(InsufficientResources, match=r"hami-devices\.io/model") as refused:
        allocator.allocate(disjoint)
    assert refused.value.permanent
