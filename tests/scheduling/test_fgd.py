"""FGD's math on heterogeneous slots, the fragmentation index, and the online workload mix."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hami_devices.assembly import build_engine
from hami_devices.errors import InvalidConfig
from hami_devices.models import Grant, ResourceRequest
from hami_devices.scheduling import fgd
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fragindex import FragmentationIndex
from hami_devices.scheduling.fragmentation import fragmentation
from hami_devices.scheduling.mix import OnlineMix, declared_mix, shapes_of
from tests.oracles import fgd_paper
from tests.oracles.placement_rules import model_key

from .conftest import ClusterFactory, devices


def _gpus(cluster: ClusterState, node: str) -> list[fgd_paper.Gpu]:
    """The node's devices as FGD sees them, from what their allocations hold (memory factor 1, 100 cores)."""
    out = []
    for row in cluster.rows_of(node):
        info = cluster.info(row)
        held = cluster.usage_of(info.uuid)
        free = 0 if held.exclusive or not info.healthy else min(
            1000, math.floor(1000 * min(Fraction(info.memory_mib - held.memory_mib, info.memory_mib),
                                        Fraction(100 - held.cores, 100)))
        )
        names = {model_key(info.model)}
        if info.traits is not None:
            names |= {model_key(n) for n in (info.traits.model, *info.traits.aliases)}
        out.append(fgd_paper.Gpu(max(free, 0), frozenset(names), info.memory_mib))
    return out


def _oracle_mix(shapes: list[dict[str, Any]]) -> list[fgd_paper.TaskShape]:
    return [
        fgd_paper.TaskShape(
            cpu_milli=s.get("cpu_milli", 0), gpu_milli=s.get("gpu_milli", 0), num_gpu=s.get("num_gpu", 0),
            weight=float(s.get("weight", 1.0)), host_memory_mib=s.get("host_memory_mib", 0),
            gpu_mem_mib=s.get("gpu_mem_mib", 0),
            models=frozenset(model_key(m) for m in s["models"]) if s.get("models") else None,
        )
        for s in shapes
    ]


def _fragmentation(gpus: list[fgd_paper.Gpu], cpu: int, mem: int, mix: list[fgd_paper.TaskShape]) -> float:
    return fgd_paper.node_fragmentation(gpus, cpu, mem, mix)



@pytest.mark.parametrize(
    ("cap", "at_least", "memory_mib", "percent", "expected"),
    [
        (16_000, 200, 4_000, None, 250),  # memory is scarcer: 4000 / 16000 of the device
        (16_000, 300, 4_000, None, 300),  # cores are scarcer: 30 % of the cores
        (15_360, 0, 1_000, None, 66),  # 1000 / 15360 = 0.0651...: rounded up, never under what was asked
        (16_000, 0, None, 33.3, 333),  # a percentage of any device: 33.3 % is 333, float noise does not make 334
        (16_000, 1000, 1_000, None, 1000),  # exclusive: the whole device
        (16_000, 0, 40_000, None, 1000),  # never more than the whole device
        (16_000, 150, None, None, 150),  # no memory given here: the cores alone
    ],
)
def test_a_shares_thousandths_are_its_scarcer_resource_rounded_up(
    cap: int, at_least: int, memory_mib: int | None, percent: float | None, expected: int
) -> None:
    assert int(fgd.thousandths(cap, at_least, memory_mib, percent)) == expected
    many = fgd.thousandths(np.array([cap, cap]), at_least, memory_mib, percent)
    assert many.tolist() == [expected, expected]


def test_host_memory_counts_as_fragmentation(make_cluster: ClusterFactory) -> None:
    """One shape: a whole GPU, 1 core and 4 GiB of host memory (expected values from FGD's definition)."""
    shapes = [{"cpu_milli": 1000, "gpu_milli": 1000, "num_gpu": 1, "host_memory_mib": 4096}]
    mix, paper = declared_mix(shapes), _oracle_mix(shapes)
    two_idle = [fgd_paper.Gpu(1000), fgd_paper.Gpu(1000)]
    assert _fragmentation(two_idle, 8000, 8192, paper) == 0.0
    # With 2 GiB of host memory left the shape cannot run: both idle GPUs are fragmented.
    assert _fragmentation(two_idle, 8000, 2048, paper) == 2000.0
    cluster = make_cluster(("a", "nvidia", "T4", 2), cpu=8000, mem=6144)
    index = FragmentationIndex(cluster, mix)
    index.sync()
    node = np.array([cluster.node_row("a")])
    assert index.node_fragmentation()[node].tolist() == [_fragmentation(_gpus(cluster, "a"), 8000, 6144, paper)]
    # Taking one GPU with a task that leaves 2 GiB strands the other one: F_n rises by a whole GPU.
    rise = _fragmentation([fgd_paper.Gpu(0), fgd_paper.Gpu(1000)], 7000, 2048, paper) - _fragmentation(
        two_idle, 8000, 6144, paper
    )
    assert rise == 1000.0
    assert index.whole_deltas(node, 1, 1000, 4096).tolist() == [rise]


def test_a_shape_given_in_mib_needs_a_different_share_of_each_device() -> None:
    shape = fgd.Shape(0, 100, 1, gpu_mem_mib=8_000)  # 8 GB and 10% of the cores
    # a 4 GB device cannot hold it at all: no free share there reaches its need (it is all fragmented)
    assert shape.need_on(np.array([16_000, 80_000, 8_000, 4_000])).tolist() == [500, 100, 1000, fgd.NEVER]


def test_a_slot_a_shape_does_not_accept_is_fragmented_for_it(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("a", "nvidia", "T4", 1))
    cluster.add_device("a", devices("a", "nvidia", "A10", 1)[0])
    a10 = cluster.infos[cluster.rows_of("a")[1]]
    assert a10 is not None
    cluster.assume("a", [Grant.on(a10, 0, a10.memory_mib // 5, 20)])  # 800 thousandths left
    shapes = [{"gpu_milli": 500, "num_gpu": 1, "models": ["T4"]}]
    index = FragmentationIndex(cluster, declared_mix(shapes))
    index.sync()
    gpus, paper = _gpus(cluster, "a"), _oracle_mix(shapes)
    assert [g.free for g in gpus] == [1000, 800]
    node = cluster.node_row("a")
    assert index.node_fragmentation()[node] == _fragmentation(gpus, 64_000, 262_144, paper) == 800.0
    # Half of the accepted T4 goes: the shape still fits there, and nothing new is fragmented.
    after = [fgd_paper.Gpu(500, gpus[0].names, gpus[0].memory_capacity), gpus[1]]
    rise = _fragmentation(after, 64_000, 262_144, paper) - _fragmentation(gpus, 64_000, 262_144, paper)
    t4 = np.array(cluster.rows_of("a")[:1])
    assert index.share_deltas(t4, np.array([500]), 0, 0).tolist() == [rise] == [0.0]


def test_the_index_follows_the_cluster_and_counts_stranded_share(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("a", "nvidia", "A100-80GB", 2), cpu=10_000, mem=1 << 30)
    # The mix asks 10 cores per whole GPU: 10 cores feed one of the two idle GPUs.
    mix = fgd.WorkloadMix((fgd.Shape(10_000, 1000, 1, None, 1.0, mem_mib=64),), cpu_only_all_idle=True)
    index = FragmentationIndex(cluster, mix)
    index.sync()
    node = np.array([cluster.node_row("a")])
    assert index.terms.total[node].tolist() == [2000]
    assert index.stranding_deltas(node, 0, 0, 0).tolist() == [0.0]
    idle, cpu, mem = index.terms.total[node], cluster.node_cpu_free[node], cluster.node_mem_free[node]
    assert index._stranded(idle, cpu, mem).tolist() == [1000.0]
    # A 500-milli task taking 8 cores leaves 1500 idle milli with 2 cores: 1300 stranded, 300 more.
    assert index.stranding_deltas(node, 500, 8_000, 0).tolist() == [300.0]
    Engine(cluster).schedule(ResourceRequest.single(memory_percent=50, cores=50))
    index.sync()  # only the moved node is recomputed
    assert index.terms.total[node].tolist() == [1500]
    assert 0.0 < fragmentation(cluster, mix) <= 1.0


def test_the_online_mix_converges_to_a_stationary_stream(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    truth = {(4000, 500): 0.6, (8000, 1000): 0.3, (2000, 250): 0.1}
    kinds = list(truth)
    learner = OnlineMix()
    assert {s.gpu_milli for s in learner.mix.shapes} >= {100, 1000}  # the neutral prior at first
    for _ in range(6000):
        cpu, milli = kinds[int(rng.choice(3, p=list(truth.values())))]
        learner.observe(ResourceRequest.single(host_cpu_milli=cpu, memory_percent=milli / 10, cores=milli // 10))
    got = {(s.cpu_milli, s.gpu_milli): float(w) for s, w in zip(learner.mix.shapes, learner.mix.weight, strict=True)}
    assert set(got) == set(truth)  # the prior has decayed out of the 95% the mix keeps
    for key, p in truth.items():
        assert abs(got[key] - p) < 0.03
    path = tmp_path / "mix.json"
    learner.save(path)
    again = OnlineMix.load(path)
    assert again.to_dict() == learner.to_dict()  # exactly: counts, refresh schedule and the mix in use
    assert again.mix.shapes == learner.mix.shapes and again.seen == 6000
    request = ResourceRequest.single(host_cpu_milli=2000, memory_percent=25, cores=25)
    for _ in range(300):  # and it goes on exactly as the learner it was saved from
        assert again.observe(request) == learner.observe(request)
    assert again.to_dict() == learner.to_dict()


def test_a_rare_constrained_model_keeps_shapes_within_the_budget() -> None:
    """Past the shape budget, each model set that constrained requests ask for keeps its two most
    frequent shapes (within a quarter of the budget): the fragmentation of its nodes stays visible."""
    learner = OnlineMix(half_life=math.inf, prior_weight=0.0, max_shapes=8, coverage=1.0)
    for k in range(1, 13):  # twelve common unconstrained shapes, the k-th seen 100 + k times
        for _ in range(100 + k):
            learner.observe(ResourceRequest.single(host_cpu_milli=1000 * k, memory_percent=50, cores=50))
    for k in range(1, 4):  # three rare shapes that only a V100 accepts
        rare = ResourceRequest.single(host_cpu_milli=500 * k, memory_percent=50, cores=50, models=["V100"])
        for _ in range(k):
            learner.observe(rare)
    shapes = learner.derive().shapes
    assert len(shapes) == 8
    v100 = [s for s in shapes if s.models == frozenset({"V100"})]
    assert sorted(s.cpu_milli for s in v100) == [1000, 1500]  # its two most frequent
    assert sorted(s.cpu_milli for s in shapes if not s.models) == [1000 * k for k in range(7, 13)]
    # within the budget nothing changes: the most frequent shapes, all of them
    roomy = OnlineMix(half_life=math.inf, prior_weight=0.0, max_shapes=64, coverage=1.0)
    for _ in range(3):
        roomy.observe(ResourceRequest.single(memory_percent=50, cores=50, models=["V100"]))
    assert len(roomy.derive().shapes) == 1


def test_request_shapes_and_declared_mixes() -> None:
    (host,) = shapes_of(ResourceRequest(host_cpu_milli=2000, host_memory_mib=512))
    assert (host.num_gpu, host.gpu_milli, host.cpu_milli, host.mem_mib) == (0, 0, 2000, 512)
    (mib,) = shapes_of(ResourceRequest.single(memory_mib=4096, cores=20, models=["T4"]))
    assert (mib.gpu_milli, mib.gpu_mem_mib, mib.models) == (200, 4096, frozenset({"T4"}))
    mix = declared_mix([{"gpu_milli": 500, "num_gpu": 1, "weight": 3}, {"cpu_milli": 1000, "weight": 1}])
    assert mix.weight.tolist() == [0.75, 0.25]
    with pytest.raises(InvalidConfig) as info:
        declared_mix([{"gpu_milli": "half"}])
    assert info.value.field == "workload-mix.shapes.0"
    with pytest.raises(InvalidConfig):
        OnlineMix.load(Path("/nonexistent/mix.json"))


@pytest.mark.parametrize("seed", range(4))
def test_the_native_kernel_rises_are_the_papers(make_cluster: ClusterFactory, seed: int) -> None:
    """Each rise the kernel reports is F_n after minus F_n before, both from FGD's definition."""
    rng = np.random.default_rng(seed)
    cluster = make_cluster(
        ("a", "nvidia", "T4", 4), ("b", "nvidia", "A100-80GB", 8), ("c", "ascend", "910B3", 2), cpu=32_000, mem=65_536
    )
    engine = Engine(cluster, "spread")
    for _ in range(12):
        memory, cores, cpu = int(rng.integers(1, 12)) * 1024, int(rng.integers(0, 5)) * 10, int(rng.integers(0, 8))
        engine.schedule(ResourceRequest.single(memory_mib=memory, cores=cores, host_cpu_milli=cpu * 1000))
    shapes = [
        {"gpu_milli": int(rng.integers(1, 11)) * 100, "num_gpu": int(rng.integers(0, 3)), "cpu_milli": 2000 * int(k),
         "host_memory_mib": 4096 * int(k), "gpu_mem_mib": int(rng.choice([0, 8192])),
         "models": ["T4"] if k == 3 else None, "weight": float(k + 1)}
        for k in range(6)
    ]
    paper = _oracle_mix(shapes)
    index = FragmentationIndex(cluster, declared_mix(shapes))
    index.sync()
    cpu, mem = int(rng.integers(0, 9)) * 1000, int(rng.integers(0, 5)) * 4096
    for name in cluster.nodes:
        gpus = _gpus(cluster, name)
        node = cluster.node_row(name)
        cpu_free, mem_free = int(cluster.node_cpu_free[node]), int(cluster.node_mem_free[node])
        before = _fragmentation(gpus, cpu_free, mem_free, paper)
        assert index.node_fragmentation()[node] == pytest.approx(before)
        rows = np.array(cluster.rows_of(name))
        take = rng.integers(1, 1001, rows.size)
        got = index.share_deltas(rows, take, cpu, mem)
        for k, gpu in enumerate(gpus):
            if gpu.free < take[k]:
                assert np.isinf(got[k])
                continue
            after = [*gpus[:k], fgd_paper.Gpu(gpu.free - int(take[k]), gpu.names, gpu.memory_capacity), *gpus[k + 1 :]]
            assert got[k] == pytest.approx(_fragmentation(after, cpu_free - cpu, mem_free - mem, paper) - before)
        whole = [k for k, g in enumerate(gpus) if g.free >= 1000]
        for count in range(len(whole) + 1):  # the first ``count`` entirely free devices go, with the host share
            taken = set(whole[:count])
            after = [fgd_paper.Gpu(0, g.names, g.memory_capacity) if k in taken else g for k, g in enumerate(gpus)]
            rise = _fragmentation(after, cpu_free - cpu, mem_free - mem, paper) - before
            assert index.whole_deltas(np.array([node]), count, cpu, mem).tolist() == pytest.approx([rise])


def test_the_configuration_declares_or_continues_a_mix(tmp_path: Path, example_inventory: Path) -> None:
    from hami_devices.config import parse_config

    with pytest.raises(InvalidConfig) as info:
        parse_config({"scheduler": {"workload-mix": {"mode": "declared"}}})
    assert info.value.field.startswith("scheduler.workload-mix")
    declared = parse_config(
        {
            "scheduler": {
                "policy": "fragmentation-aware",
                "workload-mix": {"mode": "declared", "shapes": [{"gpu-milli": 500, "weight": 3}, {"num-gpu": 2}]},
            }
        }
    )
    engine = build_engine(example_inventory, declared)
    assert engine.mix is not None and [s.gpu_milli for s in engine.mix.shapes] == [500, 1000]
    assert engine.learned_mix() is not None  # it would learn, but the declared mix is what it plans with
    learner = OnlineMix()
    for _ in range(40):
        learner.observe(ResourceRequest.single(memory_percent=25, cores=25, host_cpu_milli=2000))
    path = tmp_path / "learned.json"
    learner.save(path)
    online = parse_config({"scheduler": {"policy": "fragmentation-aware", "workload-mix": {"file": str(path)}}})
    resumed = build_engine(example_inventory, online).learned_mix()
    assert resumed is not None and resumed.seen == 40
    assert (250, 2000) in {(s.gpu_milli, s.cpu_milli) for s in resumed.mix.shapes}


def test_a_gap_the_host_can_no_longer_feed_ends_idle(make_cluster: ClusterFactory) -> None:
    """The end-waste rise against the README's definition (``fgd_paper.node_end_waste``): two T4s, one
    holding a 470 (530 free), the host with 6 cores left; a mix of 470s asking 4 cores and 320s asking 1.
    A 470 asking 5.5 cores leaves the host half a core, less than any shape that fits a gap asks, so every
    gap of the node ends idle: on either device the node ends with 1060 idle (60 + 1000, or 530 + 530).
    Judged device by device, as before, the first would have risen by W(60) - W(530) only."""
    shapes = [
        {"cpu_milli": 4000, "gpu_milli": 470, "num_gpu": 1, "weight": 1.0},
        {"cpu_milli": 1000, "gpu_milli": 320, "num_gpu": 1, "weight": 1.0},
    ]
    cluster = make_cluster(("a", "nvidia", "T4", 2), cpu=10_000)
    first = cluster.infos[cluster.rows_of("a")[0]]
    assert first is not None
    cluster.assume("a", [Grant.on(first, 0, first.memory_mib * 47 // 100, 47)], host_cpu_milli=4000)
    index = FragmentationIndex(cluster, declared_mix(shapes))
    index.sync()
    gpus, paper = _gpus(cluster, "a"), _oracle_mix(shapes)
    assert [g.free for g in gpus] == [530, 1000]
    rows = np.array(cluster.rows_of("a"))
    before = fgd_paper.node_end_waste(gpus, paper, 6000, 262_144)
    for cpu, starving in ((5500, True), (2000, False)):
        rises = index.waste_deltas(rows, np.array([60, 530]), cpu, 0)
        expected = [
            fgd_paper.node_end_waste([replace(gpus[0], free=60), gpus[1]], paper, 6000 - cpu, 262_144) - before,
            fgd_paper.node_end_waste([gpus[0], replace(gpus[1], free=530)], paper, 6000 - cpu, 262_144) - before,
        ]
        assert rises.tolist() == pytest.approx(expected, abs=1e-9)
        if starving:
            assert expected == pytest.approx([1060 - before, 1060 - before])
    device_alone = fgd_paper.end_waste(60, gpus[0], paper, fgd_paper.FILL_SHARE) - fgd_paper.end_waste(
        530, gpus[0], paper, fgd_paper.FILL_SHARE
    )
    assert index.waste_deltas(rows[:1], np.array([60]), 5500, 0)[0] > device_alone + 900
