"""Placements whose right answer is derived by hand from the definitions, the derivation beside each.

These replace a golden file that was recorded from the implementation (and
re-recorded whenever it changed).  Each scenario is small enough to reason
about: the numbers come from the documented scorer definitions and the
built-in policies' weights (``binpack``: binpack 3, trait-affinity 2,
topology 1, locality 1; ``spread``: the same with spread; ``topology-aware``:
topology 5, trait-affinity 2, binpack 1, locality 1; ``latency-aware``:
trait-affinity 5, spread 1, topology 1, locality 1; ``fragmentation-aware``:
fragmentation; ``bestfit``: bestfit).  A policy's score is the weighted mean
of its scorers.  Devices carry traits written here, not read from the catalog.
"""

from __future__ import annotations

from typing import Any

import pytest

import hami_devices as hd
from hami_devices.plugin import DeviceInfo, DeviceTraits, Grant
from hami_devices.scheduler import ClusterState, Engine, configure_engine


def gpu(
    uuid: str,
    node: str,
    index: int = 0,
    *,
    memory_mib: int = 16_000,
    bandwidth: float = 1000.0,
    cost: float = 1.0,
    year: int = 2020,
    bf16: float = 100.0,
    split_count: int = 10,
    topology: dict[str, int] | None = None,
) -> DeviceInfo:
    """A device of model G1 with the traits given here (the catalog plays no part)."""
    traits = DeviceTraits(
        vendor="nvidia", model="G1", generation="g", year=year, memory_mib=memory_mib,
        memory_bandwidth_gbps=bandwidth, peak_tflops={"fp32": 10.0, "bf16": bf16, "fp16": bf16},
        interconnect={"kind": "pcie", "bandwidth_gbps": 32.0}, tdp_watts=300.0, relative_cost=cost,
    )
    return DeviceInfo(uuid=uuid, index=index, vendor="nvidia", model="G1", node=node, memory_mib=memory_mib,
                         traits=traits, topology=topology or {}, split_count=split_count)


def hold(cluster: ClusterState, uuid: str, memory_mib: int, cores: int, *, exclusive: bool = False) -> None:
    info = cluster.info(cluster.row(uuid))
    cluster.assume(info.node, [Grant.on(info, 0, memory_mib, cores, exclusive=exclusive)])


def batch(**part: Any) -> hd.ResourceRequest:
    return hd.ResourceRequest.single(task_type="batch", **part)


def test_binpack_fills_the_fuller_device_and_spread_the_emptier() -> None:
    """Two 16,000 MiB devices, ``full`` holding 8,000 MiB and 50 cores; a batch task of 4,000 MiB, 25 cores.

    Fullness after (mean of memory and core fractions): full 0.5 x 12/16 + 0.5 x 75/100 = 0.75;
    empty 0.5 x 4/16 + 0.5 x 25/100 = 0.25.  Batch trait-affinity: 50 x cheap (1, equal costs) + 50 x
    fullness: 87.5 and 62.5.  Topology 100 (one device), locality 100 (no labels).
    binpack: full (3 x 75 + 2 x 87.5 + 100 + 100) / 7 = 600/7; empty (75 + 125 + 200) / 7 = 400/7.
    spread: full (3 x 25 + 175 + 200) / 7 = 450/7; empty (3 x 75 + 125 + 200) / 7 = 550/7.
    """
    cluster = ClusterState()
    cluster.add_node("a", 64_000, 262_144, [gpu("full", "a", 0), gpu("empty", "a", 1)])
    hold(cluster, "full", 8_000, 50)
    request = batch(memory_mib=4_000, cores=25)
    packed = Engine(cluster, "binpack").place(request)
    assert packed.grants[0].uuid == "full"
    assert packed.score == pytest.approx(600 / 7)
    assert packed.breakdown == pytest.approx({"binpack": 75.0, "trait-affinity": 87.5, "topology": 100.0,
                                              "locality": 100.0})
    spread = Engine(cluster, "spread").place(request)
    assert spread.grants[0].uuid == "empty"
    assert spread.score == pytest.approx(550 / 7)


def test_two_fullest_devices_of_one_node_for_a_two_device_part() -> None:
    """Four devices holding 0, 4,000, 8,000 and 12,000 MiB (no cores); two devices of 2,000 MiB each.

    binpack scores each device by its fullness after, a set by the mean: the two fullest that fit
    (12,000 + 2,000 <= 16,000 and 8,000 + 2,000) win: d3 and d2.
    """
    cluster = ClusterState()
    cluster.add_node("a", 64_000, 262_144, [gpu(f"d{i}", "a", i) for i in range(4)])
    for i in (1, 2, 3):
        hold(cluster, f"d{i}", 4_000 * i, 0)
    placement = Engine(cluster, "binpack").place(batch(count=2, memory_mib=2_000, cores=0))
    assert sorted(g.uuid for g in placement.grants) == ["d2", "d3"]


def test_topology_aware_takes_the_linked_pair_that_is_free() -> None:
    """Pair scores: d0-d1 and d2-d3 are linked (100), every other pair 20.  d0 holds a share, so an
    exclusive part (100 cores) of two devices may use d1, d2, d3 only: {d2, d3} scores topology 100,
    {d1, d2} and {d1, d3} score 20 (every other scorer is the same for all three sets).  With
    ``topology: required`` (pairs of at least 50) a node offering only pairs of 20 is refused with
    NodeTopologyUnsatisfied.
    """
    def linked(i: int, j: int) -> int:
        return 100 if i // 2 == j // 2 else 20

    devices = [gpu(f"d{i}", "a", i, topology={f"d{j}": linked(i, j) for j in range(4) if j != i}) for i in range(4)]
    cluster = ClusterState()
    cluster.add_node("a", 64_000, 262_144, devices)
    hold(cluster, "d0", 1_000, 10)
    request = hd.ResourceRequest.single(task_type="training", count=2, cores=100, topology="required")
    placement = Engine(cluster, "topology-aware").place(request)
    assert sorted(g.uuid for g in placement.grants) == ["d2", "d3"]
    hold(cluster, "d3", 1_000, 10)  # now only d1-d2 (20) is free of sharers
    with pytest.raises(hd.InsufficientResources) as refused:
        Engine(cluster, "topology-aware").place(request)
    assert refused.value.reasons["a"] == [hd.ReasonCode.NODE_TOPOLOGY_UNSATISFIED]


@pytest.mark.parametrize(("slo_ms", "chosen"), [(10.0, "fast"), (40.0, "slow")])
def test_latency_aware_takes_the_cheapest_device_that_meets_the_slo(slo_ms: float, chosen: str) -> None:
    """An 8 GiB inference task streams 8 GiB per step: 8 / 2000 GB/s = 4 ms on ``fast`` (cost 1.0),
    8 / 250 GB/s = 32 ms on ``slow`` (cost 0.25), both idle.  Devices meeting the SLO score
    50 + 50 x cheapest/cost, the others 50 x SLO/latency.  SLO 10 ms: fast 100, slow 15.6.  SLO 40 ms:
    both meet it, fast 62.5, slow 100.  Spread, topology and locality are equal on the two devices.
    """
    cluster = ClusterState()
    cluster.add_node("a", 64_000, 262_144, [
        gpu("fast", "a", 0, memory_mib=32_000, bandwidth=2000.0, cost=1.0),
        gpu("slow", "a", 1, memory_mib=32_000, bandwidth=250.0, cost=0.25),
    ])
    request = hd.ResourceRequest.single(task_type="inference", latency_slo_ms=slo_ms, memory_mib=8_192, cores=10)
    placement = Engine(cluster, "latency-aware").place(request)
    assert placement.grants[0].uuid == chosen
    assert placement.breakdown["trait-affinity"] == pytest.approx(100.0)


def test_training_prefers_throughput_and_memory_and_interactive_prefers_older_cards() -> None:
    """Training: 0.5 x bf16 ratio + 0.3 x memory ratio + 0.2 x bf16 ratio again (one device): ``big``
    (300 TF, 32,000 MiB) 100, ``small`` (100 TF, 16,000 MiB) 100 x (0.5/3 + 0.15 + 0.2/3) = 38.3.
    Interactive: 0.6 x age (newest 0, oldest 1) + 0.4 x (1 - share): ``old`` (2018) wins over ``new``
    (2023) by 60 points whatever their share.  binpack's own scorer sees both pairs alike (a whole
    device each for training; 10 % of a device of the same size for interactive).
    """
    cluster = ClusterState()
    cluster.add_node("a", 64_000, 262_144, [gpu("big", "a", 0, memory_mib=32_000, bf16=300.0),
                                            gpu("small", "a", 1, memory_mib=16_000, bf16=100.0)])
    train = hd.ResourceRequest.single(task_type="training", cores=100)
    assert Engine(cluster, "binpack").place(train).grants[0].uuid == "big"
    ages = ClusterState()
    ages.add_node("a", 64_000, 262_144, [gpu("new", "a", 0, year=2023), gpu("old", "a", 1, year=2018)])
    play = hd.ResourceRequest.single(task_type="interactive", memory_percent=10, cores=10)
    placement = Engine(ages, "binpack").place(play)
    assert placement.grants[0].uuid == "old"
    assert placement.breakdown["trait-affinity"] == pytest.approx(100 * (0.6 + 0.4 * 0.9))


def test_locality_follows_the_labels_asked_for() -> None:
    """Two identical nodes labelled zone=a and zone=b; a request wishing zone=b: locality 100 there, 0 on a;
    everything else equal, so binpack takes node b (without the wish the tie goes to the first name, a)."""
    cluster = ClusterState()
    cluster.add_node("a", 64_000, 262_144, [gpu("ga", "a")], labels={"zone": "a"})
    cluster.add_node("b", 64_000, 262_144, [gpu("gb", "b")], labels={"zone": "b"})
    engine = Engine(cluster, "binpack")
    assert engine.place(batch(memory_mib=1_000, cores=10)).node == "a"
    wished = hd.ResourceRequest(task_type="batch", parts=[{"memory_mib": 1_000, "cores": 10}], labels={"zone": "b"})
    assert engine.place(wished).node == "b"


def test_fragmentation_aware_fills_the_half_free_device() -> None:
    """Mix: whole-device tasks and half-device tasks, equally popular.  Node ``half`` has one device half
    used (free share 500), node ``idle`` one idle device.  A half-device task:
    * on half: before, the whole task cannot run (500 < 1000: all 500 idle thousandths are its fragment),
      the half task can (fragment 0): F = 0.5 x 500 = 250; after, nothing is idle: F = 0. Rise -250.
    * on idle: before F = 0 (both fit); after 500 free: the whole task cannot run, F = 250. Rise +250.
    FGD's score int(100 x sigmoid(-rise/1000)): 56 against 43; the policy takes ``half``.
    """
    cluster = ClusterState()
    cluster.add_node("half", 64_000, 262_144, [gpu("gh", "half")])
    cluster.add_node("idle", 64_000, 262_144, [gpu("gi", "idle")])
    hold(cluster, "gh", 8_000, 50)
    config = hd.HamiConfig.model_validate({"scheduler": {"policy": "fragmentation-aware", "workload-mix": {
        "mode": "declared", "shapes": [{"num-gpu": 1, "gpu-milli": 1000}, {"num-gpu": 1, "gpu-milli": 500}]}}})
    placement = configure_engine(cluster, config).place(batch(memory_percent=50, cores=50))
    assert placement.node == "half"


def test_bestfit_takes_the_node_left_with_least() -> None:
    """bestfit: left = 0.5 x free CPU after / largest node CPU + 0.5 x free device share after / largest
    node's device share.  Node ``busy``: 16,000 of 32,000 millicores free, one device half used;
    ``roomy``: 32,000 free, one idle device.  A task of 1,000 millicores and a quarter device:
    busy 0.5 x 15/32 + 0.5 x 250/1000 = 0.359 (score 64); roomy 0.5 x 31/32 + 0.5 x 750/1000 = 0.859
    (score 14): busy.
    """
    cluster = ClusterState()
    cluster.add_node("busy", 32_000, 262_144, [gpu("gb", "busy")])
    cluster.add_node("roomy", 32_000, 262_144, [gpu("gr", "roomy")])
    hold(cluster, "gb", 8_000, 50)
    cluster.assume("busy", [], host_cpu_milli=16_000)
    placement = Engine(cluster, "bestfit").place(batch(memory_percent=25, cores=25, host_cpu_milli=1_000))
    assert placement.node == "busy"


def test_a_refusal_names_what_each_device_and_node_lacks() -> None:
    """One node of five 16,000 MiB devices, none able to take 8,000 MiB and 10 cores: ``sick`` is unhealthy,
    ``held`` has an exclusive holder, ``shared`` its one sharer slot taken (split count 1), ``nearly``
    12,000 MiB taken, ``busy`` 95 cores taken.  Each device says the rule it breaks; the node has too few
    devices; the request fits the empty cluster, so the refusal is not permanent.  A model nothing in the
    cluster answers to is UnknownModel, and permanent.
    """
    cluster = ClusterState()
    cluster.add_node("a", 64_000, 262_144, [
        gpu("sick", "a", 0), gpu("held", "a", 1), gpu("shared", "a", 2, split_count=1), gpu("nearly", "a", 3),
        gpu("busy", "a", 4),
    ])
    hold(cluster, "held", 0, 100, exclusive=True)
    hold(cluster, "shared", 1_000, 10)
    hold(cluster, "nearly", 12_000, 0)
    hold(cluster, "busy", 0, 95)
    cluster.set_health("sick", hd.Health.UNHEALTHY)
    engine = Engine(cluster)
    with pytest.raises(hd.InsufficientResources) as refused:
        engine.place(batch(memory_mib=8_000, cores=10))
    code = hd.ReasonCode
    assert {k: v for k, v in refused.value.reasons.items() if k != "a"} == {
        "sick": [code.CARD_UNHEALTHY],
        "held": [code.CARD_EXCLUSIVELY_HELD],
        "shared": [code.CARD_SPLIT_EXHAUSTED],
        "nearly": [code.CARD_INSUFFICIENT_MEMORY],
        "busy": [code.CARD_INSUFFICIENT_CORE],
    }
    assert code.NODE_INSUFFICIENT_DEVICES in refused.value.reasons["a"]
    assert refused.value.permanent is False
    with pytest.raises(hd.InsufficientResources) as unknown:
        engine.place(batch(memory_mib=1_000, models=["Z9"]))
    assert unknown.value.reasons == {"parts.0.models": [code.UNKNOWN_MODEL]}
    assert unknown.value.permanent is True
