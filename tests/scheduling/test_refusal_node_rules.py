"""A refusal says the node rules in its message (issue 38, point 6): a node selector no node matches, a host
resource no node has, and a nearest node that fails a rule of its own, not only its device count.

Three nodes (zone a: two nodes of two T4, 8 CPUs each; zone b: one L4 node with 16 CPUs); the expected
texts follow from those facts alone."""

from __future__ import annotations

import pytest

import hami_devices as hd
from hami_devices.inventory import parse_inventory
from hami_devices.scheduler import Engine

INVENTORY = parse_inventory({"nodes": [
    {"name": "t4", "replicas": 2, "cpu_milli": 8_000, "memory_mib": 65_536, "labels": {"zone": "a"},
     "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}]},
    {"name": "l4", "cpu_milli": 16_000, "memory_mib": 65_536, "labels": {"zone": "b"},
     "devices": [{"vendor": "nvidia", "model": "L4", "count": 1}]},
]})


@pytest.fixture(scope="module")
def engine() -> Engine:
    return hd.build_engine(INVENTORY)


def refusal(engine: Engine, request: dict[str, object]) -> hd.InsufficientResources:
    with pytest.raises(hd.InsufficientResources) as refused:
        engine.place(request)
    return refused.value


def test_a_selector_no_node_matches_is_the_headline_and_no_node_is_called_near(engine: Engine) -> None:
    err = refusal(engine, {"node_selector": {"zone": "c"}, "parts": [{"memory_mib": 1024}]})
    assert "no node matches the node selector zone=c" in str(err)
    assert err.nearest == [] and "nearest" not in str(err)
    assert err.permanent is True


def test_a_host_resource_no_node_has_is_the_headline(engine: Engine) -> None:
    err = refusal(engine, {"host_cpu_milli": 20_000, "parts": [{"memory_mib": 1024}]})
    assert "no node with 20000m CPU free" in str(err) and err.nearest == []


def test_a_nearest_node_says_which_of_its_own_rules_it_fails(engine: Engine) -> None:
    # two T4 on each zone-a node, but 12 CPUs only on the L4 node: the T4 nodes are nearest by devices
    err = refusal(engine, {"host_cpu_milli": 12_000, "parts": [{"count": 2, "memory_mib": 1024, "models": ["T4"]}]})
    assert err.nearest == [
        "t4-0 (2/2 devices, but the node fails NodeInsufficientCpu)",
        "t4-1 (2/2 devices, but the node fails NodeInsufficientCpu)",
    ]
    selector = refusal(engine, {"node_selector": {"zone": "b"}, "parts": [{"memory_mib": 1024, "models": ["T4"]}]})
    assert all(n.endswith("(1/1 devices, but the node fails NodeSelectorMismatch)") for n in selector.nearest)
    assert "nearest: t4-0 (1/1 devices, but the node fails NodeSelectorMismatch)" in str(selector)
