"""Engine.judge_nodes agrees with the engine's own placement, node by node."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import hami_devices as hd
from hami_devices.config import parse_config
from hami_devices.errors import InsufficientResources
from hami_devices.inventory import parse_inventory
from hami_devices.models import RequestPart, ResourceRequest
from hami_devices.scheduler import Engine
from hami_devices.scheduling.scoring import combined

INVENTORY = parse_inventory({"nodes": [
    {"name": "a", "cpu_milli": 8000, "memory_mib": 65536,
     "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}, {"vendor": "nvidia", "model": "A30", "count": 1}]},
    {"name": "b", "cpu_milli": 16000, "memory_mib": 65536,
     "devices": [{"vendor": "nvidia", "model": "L4", "count": 4}]},
    {"name": "c", "cpu_milli": 4000, "memory_mib": 65536,
     "devices": [{"vendor": "ascend", "model": "310P", "count": 2}, {"vendor": "nvidia", "model": "T4", "count": 1}]},
    {"name": "d", "cpu_milli": 32000, "memory_mib": 131072,
     "devices": [{"vendor": "nvidia", "model": "H100", "count": 4, "link": "nvlink"}]},
]})

parts = st.fixed_dictionaries({
    "count": st.integers(1, 3),
    "memory_mib": st.sampled_from([1000, 4000, 12000, 30000, 90000]),
    "cores": st.sampled_from([0, 30, 100]),
    "models": st.sampled_from([[], ["T4"], ["L4", "A30"], ["H100"], ["Ascend310P"]]),
})
requests = st.builds(
    lambda ps, cpu, topo: ResourceRequest(parts=[RequestPart(**p) for p in ps], host_cpu_milli=cpu, topology=topo),
    st.lists(parts, min_size=1, max_size=2), st.sampled_from([0, 2000, 6000]),
    st.sampled_from(["none", "required"]),
)


# A declared mix: the online learner would learn from the probes below (``place`` observes what it is
# asked, ``judge_nodes`` does not), so the two would score under different mixes.
SHAPES = [
    {"num-gpu": 1, "gpu-milli": 250, "weight": 2}, {"num-gpu": 1, "gpu-milli": 1000, "weight": 2},
    {"num-gpu": 2, "gpu-milli": 1000, "weight": 1}, {"num-gpu": 0, "cpu-milli": 2000, "weight": 1},
]
FIXED_MIX = parse_config(
    {"scheduler": {"policy": "fragmentation-aware", "workload-mix": {"mode": "declared", "shapes": SHAPES}}}
)


def configured(policy: str) -> Engine:
    if policy == "fragmentation-aware":
        return hd.build_engine(INVENTORY, FIXED_MIX)
    return hd.build_engine(INVENTORY, policy=policy)


def pinned(engine: Engine, request: ResourceRequest, node: str) -> ResourceRequest:
    here = [engine.cluster.info(r).uuid for r in engine.cluster.rows_of(node)]
    return request.model_copy(update={"parts": [p.model_copy(update={"uuids": here}) for p in request.parts]})


def fits(engine: Engine, request: ResourceRequest) -> bool:
    try:
        engine.place(request)
    except InsufficientResources:
        return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(  # the online mix learning from the probes made place and judge_nodes disagree here
    fill=[ResourceRequest(parts=[RequestPart(count=1, memory_mib=1000, cores=0)])],
    request=ResourceRequest(parts=[RequestPart(count=1, memory_mib=1000, cores=100, models=["T4"])]),
    scored=True,
    policy="fragmentation-aware",
)
@given(
    fill=st.lists(requests, max_size=6),
    request=requests,
    scored=st.booleans(),
    policy=st.sampled_from(["binpack", "fragmentation-aware"]),
)
def test_verdicts_match_placement_node_by_node(
    fill: list[Any], request: ResourceRequest, scored: bool, policy: str
) -> None:
    engine = configured(policy)
    empty = configured(policy)
    for r in fill:
        placed = engine.try_place(r)
        if placed is not None:
            engine.assume(placed)
    verdict = engine.judge_nodes(request, scores=scored)
    nodes = sorted(engine.cluster.nodes)
    assert sorted([*verdict.feasible, *verdict.reasons]) == nodes
    assert not set(verdict.feasible) & set(verdict.reasons)
    for node in nodes:
        assert (node in verdict.feasible) == fits(engine, pinned(engine, request, node)), node
        if node in verdict.unresolvable:
            assert not fits(empty, pinned(empty, request, node)), node
        elif node in verdict.reasons:
            assert verdict.reasons[node]
            # Exact only for one part without required topology: the empty-node check counts devices, while
            # the engine picks parts' sets greedily in turn and judges topology on the set.
            if request.topology == "none" and len(request.parts) == 1:
                assert fits(empty, pinned(empty, request, node)), node
    if scored and verdict.scores and len(request.parts) == 1 and request.parts[0].count == 1:
        best = max(verdict.scores.items(), key=lambda kv: (round(kv[1], 9), [-ord(ch) for ch in kv[0]]))[0]
        assert engine.place(request).node == best


def test_names_nothing_answers_to_are_unresolvable_everywhere() -> None:
    engine = hd.build_engine(INVENTORY)
    verdict = engine.judge_nodes(ResourceRequest.single(models=["NoSuchCard"]))
    assert verdict.feasible == [] and verdict.unresolvable == set(engine.cluster.nodes)
    assert all(codes == [hd.ReasonCode.UNKNOWN_MODEL] for codes in verdict.reasons.values())


TWINS = parse_inventory({"nodes": [
    *({"name": f"h{i}", "cpu_milli": 64000, "memory_mib": 262144,
       "devices": [{"vendor": "nvidia", "model": "H100", "count": 8, "link": "nvlink", "numa_nodes": 2}]}
      for i in range(5)),
    *({"name": f"l{i}", "cpu_milli": 64000, "memory_mib": 262144,
       "devices": [{"vendor": "nvidia", "model": "L4", "count": 8, "numa_nodes": 2}]} for i in range(3)),
    *({"name": f"m{i}", "cpu_milli": 64000, "memory_mib": 262144,  # the same cards, another pair shape
       "devices": [{"vendor": "nvidia", "model": "L4", "count": 8, "numa_nodes": 1}]} for i in range(2)),
]})
one_card = st.builds(  # a share pinned to one card, so that twin nodes end up in different situations
    lambda node, index, memory: ResourceRequest(parts=[RequestPart(
        memory_mib=memory, cores=20, uuids=[TWINS.nodes[node].devices[index].uuid])]),
    st.sampled_from([0, 1, 5, 6, 8]), st.integers(0, 7), st.sampled_from([4000, 20000]),
)
multi = st.builds(
    lambda count, memory, cores, model, topo: ResourceRequest(
        parts=[RequestPart(count=count, memory_mib=memory, cores=cores, models=[model])], topology=topo),
    st.integers(2, 5), st.sampled_from([2000, 20000, 70000]), st.sampled_from([10, 50, 100]),
    st.sampled_from(["H100", "L4"]), st.sampled_from(["none", "required"]),
)


def _pinned_share(node: int, index: int) -> ResourceRequest:
    uuid = TWINS.nodes[node].devices[index].uuid
    return ResourceRequest(parts=[RequestPart(memory_mib=20000, cores=20, uuids=[uuid])])


def _l4s(count: int) -> ResourceRequest:
    return ResourceRequest(parts=[RequestPart(count=count, memory_mib=20000, cores=10, models=["L4"])])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fill=st.lists(st.one_of(multi, one_card), max_size=8), request=multi,
       policy=st.sampled_from(["binpack", "spread", "topology-aware"]))
# Empty L4 nodes of two NUMA shapes score alike card by card, but not as sets of five.
@example(fill=[], request=_l4s(5), policy="binpack")
# Two nodes with six free cards of equal scores: l0 misses one card per NUMA node, l1 two of NUMA node 0.
@example(fill=[_pinned_share(5, 0), _pinned_share(5, 4), _pinned_share(6, 0), _pinned_share(6, 1)],
         request=_l4s(4), policy="binpack")
def test_node_scores_of_twin_nodes_are_each_nodes_own(fill: list[Any], request: ResourceRequest, policy: str) -> None:
    """Nodes in the same situation share one set choice; each score is still what that node's own choice gives."""
    engine = hd.build_engine(TWINS, policy=policy)
    for r in fill:
        placed = engine.try_place(r)
        if placed is not None:
            engine.assume(placed)
    verdict = engine.judge_nodes(request, scores=True)
    chooser = engine.chooser(request)
    [ev] = [engine.evaluate(part, i, request) for i, part in enumerate(request.parts)]
    c = engine.cluster
    own = {}
    for name in c.nodes:
        choice = chooser.node_choice(ev, c.node_row(name), set())
        if choice is not None:
            own[name] = combined([(ev, choice)])
    assert verdict.scores == own
