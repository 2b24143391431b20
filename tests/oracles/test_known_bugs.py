"""Product bugs the oracles found, each as its smallest reproduction, asserting what the specification says.

All seven found so far are fixed; each stays here as a plain test, so that it
stays fixed, and the property tests that found them now draw the cases they
were once kept away from.  A new finding goes here as a strict xfail, whose
reason names the limit put on the property's draws until it is fixed.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
import yaml

import hami_devices as hd
from hami_devices.plugin import DeviceInfo, Grant
from hami_devices.scheduler import ClusterState, Engine, configure_engine
from hami_devices.scheduling.fragmentation import node_fragmentation
from tests.oracles import fgd_paper


def _device(uuid: str, node: str, model: str, memory_mib: int, index: int = 0) -> DeviceInfo:
    return DeviceInfo(uuid=uuid, index=index, vendor="nvidia", model=model, node=node, memory_mib=memory_mib)


def _t4_and_a100(same_node: bool) -> ClusterState:
    cluster = ClusterState()
    if same_node:
        both = [_device("t4", "n0", "T4", 15_360), _device("a100", "n0", "A100", 81_920, 1)]
        cluster.add_node("n0", 32_000, 65_536, both)
    else:
        cluster.add_node("n0", 32_000, 65_536, [_device("t4", "n0", "T4", 15_360)])
        cluster.add_node("n1", 32_000, 65_536, [_device("a100", "n1", "A100", 81_920)])
    return cluster


@pytest.mark.parametrize("same_node", [True, False])
def test_parts_that_fit_together_are_placed(same_node: bool) -> None:
    """Part 0 may use either device, part 1 only the T4: part 0 on the A100 and part 1 on the T4 fits.

    binpack puts part 0 on the fuller T4 first, and then part 1 has nowhere to go: refused
    (``permanent=False``, reasons only the A100's type mismatch).
    """
    request = hd.ResourceRequest(parts=[{"memory_mib": 8000}, {"memory_mib": 8000, "models": ["T4"]}],
                                 same_node=same_node)
    placement = Engine(_t4_and_a100(same_node), "binpack").place(request)
    assert sorted((g.part, g.uuid) for g in placement.grants) == [(0, "a100"), (1, "t4")]


def test_several_parts_take_the_best_set() -> None:
    """binpack's score of a placement is its mean fullness after (``scorers/fit.py``).

    Part 0 (a whole device's memory, no cores) makes either device half full; part 1 (15,359 MiB)
    makes the T4 half full but the A100 only 9 % full.  Best: part 0 on the A100, part 1 on the T4
    (mean fullness 0.49998); the engine gives part 0 the T4 (the tie goes to the first node) and
    part 1 the A100 (0.297).
    """
    request = hd.ResourceRequest(parts=[{"cores": 0}, {"memory_mib": 15_359}], same_node=False)
    cluster = _t4_and_a100(same_node=False)
    engine = configure_engine(
        cluster, hd.HamiConfig(), policy="only-binpack", policies=Path(__file__).with_name("data")
        / "single-scorer-policies.yaml"
    )
    placement = engine.place(request)
    assert sorted((g.part, g.uuid) for g in placement.grants) == [(0, "a100"), (1, "t4")]


def test_a_refusal_always_says_why() -> None:
    """Two parts, one device: each part alone fits it, both never can.  The refusal once had no reason at
    all (``reasons == {}``); now the node says it has too few devices for the parts together."""
    cluster = ClusterState()
    cluster.add_node("n0", 32_000, 65_536, [_device("g0", "n0", "T4", 15_360)])
    with pytest.raises(hd.InsufficientResources) as refused:
        Engine(cluster).place(hd.ResourceRequest(parts=[{"cores": 10}, {"cores": 10}]))
    assert refused.value.reasons == {"n0": [hd.ReasonCode.NODE_INSUFFICIENT_DEVICES]}


def _discover(config: dict[str, object]) -> list[hd.Device]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "inventory.yaml"
        path.write_text(yaml.safe_dump({"nodes": [{"name": "n0", "devices": [{"vendor": "nvidia", "model": "T4"}]}]}))
        return hd.discover(path, config=hd.HamiConfig.model_validate(config))


def test_the_memory_factor_is_the_product_of_the_decimals_given() -> None:
    """memory <= total x overcommit x scaling x gpu-memory-fraction: 15,360 x 1.5 x 0.7 = 16,128 MiB exactly.

    The float product is 16,127.999..., floored to 16,127: a request for 16,128 MiB is refused."""
    devices = _discover({"device-plugin": {"memory-overcommit": 1.5, "memory-scaling": 0.7}})
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 16_128}]})
    assert handle.grants[0].memory_mib == 16_128


def test_the_core_capacity_is_100_times_the_core_scaling_given() -> None:
    """cores <= 100 x core scaling: 100 x 0.57 = 57; int(100 * 0.57) is 56, so 57 cores are refused."""
    devices = _discover({"device-plugin": {"core-scaling": 0.57}})
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 100, "cores": 57}]})
    assert handle.grants[0].cores == 57


def _fragmentation_engine(cluster: ClusterState, shape: dict[str, int]) -> Engine:
    config = hd.HamiConfig.model_validate(
        {"scheduler": {"policy": "fragmentation-aware", "workload-mix": {"mode": "declared", "shapes": [shape]}}}
    )
    return configure_engine(cluster, config)


def test_the_scored_rise_is_the_rise_of_the_nodes_fragmentation() -> None:
    """A T4 half full of memory (free share 500: the scarcer of 50 % memory and 100 % cores); a task of
    40 % of the cores and 10 % of the memory leaves it 40 % of each, a free share of 400, so for a mix
    of 300-thousandth tasks F_n stays 0 (rise 0, FGD score 50).  The policy scores a rise of 100 (score
    47), as if the device's free share fell by the task's larger fraction, to 100; the SDK's own F_n after
    the placement is 0.  (test_fgd_paper draws only tasks with equal fractions, where the two agree.)"""
    info = _device("g0", "n0", "T4", 16_000)
    cluster = ClusterState()
    cluster.add_node("n0", 32_000, 65_536, [info])
    cluster.assume("n0", [Grant.on(info, 0, 8_000, 0)])
    engine = _fragmentation_engine(cluster, {"num-gpu": 1, "gpu-milli": 300})
    request = hd.ResourceRequest(parts=[{"cores": 40, "memory_mib": 1_600}])
    before = node_fragmentation(cluster, engine.mix)["n0"]
    placement = engine.schedule(request)
    rise = node_fragmentation(cluster, engine.mix)["n0"] - before
    assert rise == 0.0
    # The share's rise also counts its node's (one device's) expected end waste: W(400) - W(500) = 100 - 200.
    gpu, mix = fgd_paper.Gpu(0, memory_capacity=16_000), [fgd_paper.TaskShape(gpu_milli=300)]
    fill = fgd_paper.FILL_SHARE
    waste = fgd_paper.end_waste(400, gpu, mix, fill) - fgd_paper.end_waste(500, gpu, mix, fill)
    assert waste == -100.0
    score = math.floor((placement.breakdown["fragmentation"] - 50.0) / 0.49 + 1e-6)
    assert score == fgd_paper.fgd_score(rise + fgd_paper.WASTE_WEIGHT * waste)


def test_a_device_too_small_for_a_shape_is_fragmented_for_it() -> None:
    """FGD: a task's fragment is the node's unallocated GPU share the task cannot use.  A task asking
    24,000 MiB cannot use an idle 16,000 MiB device (the engine refuses it there), so for a mix of only
    that task the device's whole share (1000) is fragmented; the SDK reports 0."""
    cluster = ClusterState()
    cluster.add_node("n0", 32_000, 65_536, [_device("g0", "n0", "T4", 16_000)])
    engine = _fragmentation_engine(cluster, {"num-gpu": 1, "gpu-milli": 100, "gpu-mem-mib": 24_000})
    paper = fgd_paper.node_fragmentation(
        [fgd_paper.Gpu(1000, memory_capacity=16_000)], 32_000, 65_536,
        [fgd_paper.TaskShape(gpu_milli=100, gpu_mem_mib=24_000)],
    )
    assert paper == 1000.0
    assert node_fragmentation(cluster, engine.mix)["n0"] == paper
