"""The engine against a brute-force reference placer written from the specification.

On small random clusters (1-4 nodes of 1-4 devices of mixed vendors and models,
split counts, partition catalogs, exclusive holders, memory factors, devices
filled to the MiB, unhealthy devices, unschedulable nodes, hosts short of CPU
or memory) the oracle enumerates every device set the rules allow for a
request (one or several parts, same node or not, up to three devices a part).
The engine must place exactly when a set exists; every placement it returns
must be one of them, granted as the rules say; a refusal's reasons must be the
rules each device and node breaks; and for the policies whose score has a
closed form, its choice must be an argmax of that score over all the sets.

Requests of several parts are held to all of it: the engine places their parts
in every order (up to four parts), so it finds a placement whenever one exists
and the best of them (``test_known_bugs.py`` keeps the reproductions of what it
missed while it placed the parts in one order only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import hami_devices as hd
from hami_devices.scheduler import ClusterState, Engine, configure_engine
from tests.oracles.judging import judge_decision
from tests.oracles.placement_rules import World, feasible
from tests.oracles.worlds import requests, worlds

POLICY_FILE = Path(__file__).with_name("data") / "single-scorer-policies.yaml"
ORACLE_SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, database=None)
ONE_PART_SETTINGS = settings(max_examples=350, deadline=None, derandomize=True, database=None)
POLICIES = ["binpack", "spread", "bestfit", "fragmentation-aware", "topology-aware", "latency-aware"]
CLOSED_FORM = ["binpack", "spread", "only-binpack", "only-spread", "bestfit"]


def engine_for(cluster: ClusterState, policy: str) -> Engine:
    return configure_engine(cluster, hd.HamiConfig(), policy=policy, policies=POLICY_FILE)


def describe(world: World, request: hd.ResourceRequest) -> None:
    """What the draw reached (``--hypothesis-show-statistics``)."""
    options = sum(1 for _ in feasible(world, request))
    event(f"feasible sets: {'none' if not options else '1' if options == 1 else 'several'}")
    event(f"parts: {len(request.parts)}, same_node: {request.same_node}")
    event(f"most devices in a part: {max((p.count for p in request.parts), default=0)}")


@ONE_PART_SETTINGS
@given(st.data())
def test_one_part_is_placed_exactly_where_the_rules_allow(data: Any) -> None:
    drawn = data.draw(worlds())
    policy = data.draw(st.sampled_from(POLICIES))
    request = data.draw(requests(drawn.world, max_parts=1))
    judged = judge_decision(drawn.world, engine_for(drawn.cluster(), policy), request, policy)
    assert judged.all() == []
    describe(drawn.world, request)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_partitions_are_granted_as_the_catalog_allows(data: Any) -> None:
    """Only carved models, profiles taken to their last instance, every part naming a profile or ``auto``."""
    drawn = data.draw(worlds(carved=True))
    request = data.draw(requests(drawn.world, max_parts=1, carved=True))
    judged = judge_decision(drawn.world, engine_for(drawn.cluster(), "binpack"), request, "binpack")
    assert judged.all() == []
    describe(drawn.world, request)


@ORACLE_SETTINGS
@given(st.data())
def test_several_parts_get_only_what_the_rules_allow_and_refusals_say_why(data: Any) -> None:
    drawn = data.draw(worlds())
    policy = data.draw(st.sampled_from(POLICIES))
    request = data.draw(requests(drawn.world, min_parts=2))
    judged = judge_decision(drawn.world, engine_for(drawn.cluster(), policy), request, policy)
    assert judged.wrong == []
    describe(drawn.world, request)


@pytest.mark.parametrize("policy", CLOSED_FORM)
@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_each_closed_form_policy_chooses_an_argmax(policy: str, data: Any) -> None:
    drawn = data.draw(worlds(core_capacity=100))
    request = data.draw(requests(drawn.world, max_parts=1, single=policy == "bestfit", constrained=False))
    judged = judge_decision(drawn.world, engine_for(drawn.cluster(), policy), request, policy)
    assert judged.all() == []
    describe(drawn.world, request)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_several_parts_are_placed_whenever_the_rules_allow_and_at_the_best_set(data: Any) -> None:
    drawn = data.draw(worlds(core_capacity=100))
    policy = data.draw(st.sampled_from(["binpack", "only-binpack", "spread"]))
    request = data.draw(requests(drawn.world, min_parts=2, constrained=False))
    judged = judge_decision(drawn.world, engine_for(drawn.cluster(), policy), request, policy)
    assert (judged.missed, judged.worse, judged.silent) == ([], [], False)
