"""Two-level and per-request policies, hard node constraints and part anti-affinity: what each changes.

Each knob is checked against the placement it must change, on a cluster small enough that the
right answer can be read off by hand (the comment beside each assertion says why it is right).
"""

from __future__ import annotations

import pytest

import hami_devices as hd
from hami_devices.errors import InsufficientResources, InvalidRequest, ReasonCode
from hami_devices.models import RequestPart, ResourceRequest, Taint
from hami_devices.rules import NODE_CODES, NODE_RULES, PART_NODE_RULES
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from tests.conftest import EXAMPLES
from tests.scheduling.conftest import devices


def two_nodes() -> ClusterState:
    """Node ``a`` runs one 4 GiB / 30-core share on its first T4; node ``b`` (two T4s) is empty."""
    cluster = ClusterState()
    for name in ("a", "b"):
        cluster.add_node(name, 64_000, 262_144, devices(name, "nvidia", "T4", 2))
    Engine(cluster, "binpack").schedule(ResourceRequest.single(memory_mib=4096, cores=30, uuids=["a-T4-0"]))
    return cluster


SHARE = {"memory_mib": 4096, "cores": 20}


def place_two(engine: Engine, **top: object) -> list[str]:
    out = []
    for _ in range(2):
        placement = engine.schedule(ResourceRequest.single(**SHARE, **top))
        out.append(placement.grants[0].uuid)
    return out


def test_node_spread_with_device_binpack_puts_two_shares_on_one_card_of_the_empty_node() -> None:
    # node level: b is the emptier node both times; device level: binpack packs the second share beside the first
    assert place_two(Engine(two_nodes(), "binpack", node_policy="spread")) == ["b-T4-0", "b-T4-0"]
    # one policy for both levels: spread takes an empty card each time (a's spare card first, by name) ...
    assert place_two(Engine(two_nodes(), "spread")) == ["a-T4-1", "b-T4-0"]
    # ... and binpack fills the busy card of the busy node
    assert place_two(Engine(two_nodes(), "binpack")) == ["a-T4-0", "a-T4-0"]


def test_a_request_policy_overrides_the_engine_per_level() -> None:
    engine = Engine(two_nodes(), "binpack")
    both = {"policy": {"node": "spread", "device": "binpack"}}
    assert place_two(engine, **both) == ["b-T4-0", "b-T4-0"]
    placement = Engine(two_nodes(), "binpack").place(ResourceRequest.single(**SHARE, policy="spread"))
    assert placement.grants[0].uuid == "a-T4-1" and placement.policy == "spread"  # a name sets both levels
    only_node = Engine(two_nodes(), "binpack").place(ResourceRequest.single(**SHARE, policy={"node": "spread"}))
    assert only_node.grants[0].uuid == "b-T4-0" and only_node.policy == "spread/binpack"
    with pytest.raises(InvalidRequest) as bad:
        engine.place(ResourceRequest.single(**SHARE, policy={"device": "no-such-policy"}))
    assert bad.value.field == "policy.device"


def test_node_scores_for_a_scheduler_are_the_node_policys() -> None:
    request = ResourceRequest.single(**SHARE, policy={"node": "spread", "device": "binpack"})
    verdicts = Engine(two_nodes(), "binpack").judge_nodes(request)
    assert verdicts.scores["b"] > verdicts.scores["a"]  # the empty node first, as the node policy says
    binpacked = Engine(two_nodes(), "binpack").judge_nodes(ResourceRequest.single(**SHARE))
    assert binpacked.scores["a"] > binpacked.scores["b"]


def test_split_parts_each_take_the_node_policys_node() -> None:
    request = ResourceRequest(same_node=False, policy={"node": "spread", "device": "binpack"},
                              parts=[RequestPart(**SHARE), RequestPart(**SHARE)])
    placement = Engine(two_nodes(), "binpack").place(request)
    # both parts choose the emptier node; the parts of one request take distinct devices
    assert [g.uuid for g in placement.grants] == ["b-T4-0", "b-T4-1"]


# ---------------------------------------------------------------------- hard node constraints
def labelled() -> ClusterState:
    cluster = ClusterState()
    cluster.add_node("east", 64_000, 262_144, devices("east", "nvidia", "T4", 1), {"zone": "east"})
    cluster.add_node("west", 64_000, 262_144, devices("west", "nvidia", "T4", 1), {"zone": "west"},
                     [Taint(key="dedicated", value="ml")])
    cluster.add_node("zcpu", 64_000, 262_144, [], {"zone": "east"})
    return cluster


def test_node_selector_is_hard_where_labels_are_soft() -> None:
    engine = Engine(labelled(), "binpack")
    assert engine.place(ResourceRequest.single(labels={"zone": "nowhere"})).node == "east"  # soft: placed anyway
    with pytest.raises(InsufficientResources) as refused:
        engine.place(ResourceRequest.single(node_selector={"zone": "nowhere"}))
    assert refused.value.permanent
    assert all(ReasonCode.NODE_SELECTOR_MISMATCH in refused.value.reasons[n] for n in ("east", "west", "zcpu"))
    assert engine.place(ResourceRequest.single(node_selector={"zone": "east"})).node == "east"


def test_every_label_of_a_node_selector_must_match() -> None:
    """east has zone=east but no pool label: a selector naming both fails there, whichever label comes last."""
    engine = Engine(labelled(), "binpack")
    for selector in ({"pool": "gpu", "zone": "east"}, {"zone": "east", "pool": "gpu"}):
        with pytest.raises(InsufficientResources) as refused:
            engine.place(ResourceRequest.single(node_selector=selector))
        assert ReasonCode.NODE_SELECTOR_MISMATCH in refused.value.reasons["east"]


def test_each_untolerated_taint_keeps_off_its_own_node() -> None:
    cluster = ClusterState()
    cluster.add_node("a", 64_000, 262_144, devices("a", "nvidia", "T4", 1), taints=[Taint(key="one")])
    cluster.add_node("b", 64_000, 262_144, devices("b", "nvidia", "T4", 1), taints=[Taint(key="two")])
    with pytest.raises(InsufficientResources) as refused:
        Engine(cluster, "binpack").place(ResourceRequest.single())
    assert refused.value.reasons == {"a": [ReasonCode.NODE_TAINT_NOT_TOLERATED],
                                     "b": [ReasonCode.NODE_TAINT_NOT_TOLERATED]}
    tolerates_one = ResourceRequest.single(tolerations=[{"key": "one", "operator": "Exists"}])
    assert Engine(cluster, "binpack").place(tolerates_one).node == "a"


def test_a_taint_keeps_off_requests_that_do_not_tolerate_it() -> None:
    engine = Engine(labelled(), "binpack")
    engine.schedule(ResourceRequest.single(cores=100))  # east's only card
    with pytest.raises(InsufficientResources) as refused:
        engine.place(ResourceRequest.single(cores=100))
    assert refused.value.reasons["west"] == [ReasonCode.NODE_TAINT_NOT_TOLERATED]
    assert refused.value.permanent is False  # east frees one day
    for toleration in ({"key": "dedicated", "value": "ml"}, {"key": "dedicated", "operator": "Exists"},
                       {"operator": "Exists"}):
        assert engine.place(ResourceRequest.single(cores=100, tolerations=[toleration])).node == "west"
    with pytest.raises(InsufficientResources):
        engine.place(ResourceRequest.single(cores=100, tolerations=[{"key": "dedicated", "value": "other"}]))


def test_cpu_only_tasks_kept_off_accelerator_nodes_when_configured() -> None:
    cpu_task = ResourceRequest(host_cpu_milli=1000)
    cluster = labelled()
    # binpack on hosts: with equal hosts the first name wins: an accelerator node
    assert Engine(cluster, "binpack").place(cpu_task).node == "east"
    cluster.taint_accelerators = True
    engine = Engine(cluster, "binpack")
    assert engine.place(cpu_task).node == "zcpu"
    assert engine.place(ResourceRequest.single(host_cpu_milli=1000)).node == "east"  # a device task tolerates it
    allowed = ResourceRequest(host_cpu_milli=1000, tolerations=[{"key": "hami.io/accelerator", "operator": "Exists"}])
    assert engine.place(allowed).node == "east"
    engine.cluster.set_schedulable("zcpu", False)
    with pytest.raises(InsufficientResources) as refused:
        engine.place(cpu_task)
    assert refused.value.reasons["east"] == [ReasonCode.NODE_TAINT_NOT_TOLERATED]


def test_anti_affinity_keeps_parts_on_different_nodes() -> None:
    cluster = ClusterState()
    for name in ("n0", "n1"):
        cluster.add_node(name, 64_000, 262_144, devices(name, "nvidia", "T4", 2))
    apart = ResourceRequest(same_node=False, parts=[
        RequestPart(name="primary", memory_mib=1024), RequestPart(name="replica", memory_mib=1024,
                                                                   anti_affinity=["primary"])])
    together = apart.model_copy(update={"parts": [RequestPart(memory_mib=1024), RequestPart(memory_mib=1024)]})
    engine = Engine(cluster, "binpack")
    assert len({g.node for g in engine.place(together).grants}) == 1  # binpack keeps them together
    assert len({g.node for g in engine.place(apart).grants}) == 2
    cluster.set_schedulable("n1", False)
    with pytest.raises(InsufficientResources) as refused:
        engine.place(apart)
    assert ReasonCode.NODE_ANTI_AFFINITY in refused.value.codes


def test_anti_affinity_is_validated() -> None:
    with pytest.raises(InvalidRequest, match="same_node"):
        ResourceRequest(parts=[RequestPart(name="a"), RequestPart(name="b", anti_affinity=["a"])])
    with pytest.raises(InvalidRequest, match="not another part"):
        ResourceRequest(same_node=False, parts=[RequestPart(name="a", anti_affinity=["zz"])])


def test_the_constraints_are_rows_of_the_rule_table() -> None:
    codes = [r.code for r in NODE_RULES]
    assert ReasonCode.NODE_SELECTOR_MISMATCH in codes and ReasonCode.NODE_TAINT_NOT_TOLERATED in codes
    assert tuple(codes) == NODE_CODES
    assert [r.code for r in PART_NODE_RULES] == [ReasonCode.NODE_ANTI_AFFINITY]


def test_booking_an_allocation_twice_says_so() -> None:
    """Booking identity is the allocation id: the ledger's allocation is booked even while a placement assumed
    here still holds its device (listed as a conflict until that placement is forgotten); the same id twice is
    refused."""
    devices = hd.discover(EXAMPLES / "cluster.yaml")
    engine = hd.build_engine(EXAMPLES / "cluster.yaml")
    placement = engine.schedule(ResourceRequest.single(models=["T4"], cores=100))  # assumed as p1
    handle = hd.allocate(devices, placement)
    engine.cluster.book(handle)
    (uuid,) = handle.uuids
    assert ReasonCode.CARD_EXCLUSIVELY_HELD in engine.cluster.conflicts[handle.id][uuid]
    engine.cluster.forget(placement.booking_id or "")
    engine.cluster.forget(handle.id)
    engine.cluster.book(handle)
    assert handle.id not in engine.cluster.conflicts
    with pytest.raises(InvalidRequest, match="already booked"):
        engine.cluster.book(handle)
    hd.release(handle)
