"""FGD's math on heterogeneous slots, the fragmentation index, and the online workload mix."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from hami_devices.assembly import build_engine
from hami_devices.errors import InvalidConfig
from hami_devices.models import ResourceRequest
from hami_devices.scheduling import fgd
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fragindex import FragmentationIndex
from hami_devices.scheduling.fragmentation import fragmentation
from hami_devices.scheduling.mix import OnlineMix, declared_mix, shapes_of

from . import fgd_reference
from .conftest import ClusterFactory

NEVER = fgd.NEVER


def _need(mix: fgd.WorkloadMix, mem_cap: list[int]) -> np.ndarray:
    caps = np.array([mem_cap], dtype=np.int64)
    return np.stack([s.need_on(caps) for s in mix.shapes], axis=-1)


def test_host_memory_counts_as_fragmentation() -> None:
    mix = fgd.WorkloadMix((fgd.Shape(1000, 1000, 1, None, 1.0, mem_mib=4096),))
    free = np.array([[1000, 1000]], dtype=np.int64)
    t = fgd.terms(free, _need(mix, [16_000, 16_000]))
    cpu = np.array([8000], dtype=np.int64)
    assert fgd.frag(t.count_ge, t.small, t.total, cpu, np.array([8192]), mix).tolist() == [0.0]
    # With 2 GiB of host memory left no shape fits: both idle GPUs are fragmented.
    assert fgd.frag(t.count_ge, t.small, t.total, cpu, np.array([2048]), mix).tolist() == [2000.0]
    # Taking one GPU with a task that leaves too little memory strands the other one.
    base = fgd.frag(t.count_ge, t.small, t.total, cpu, np.array([6144]), mix)
    need = _need(mix, [16_000, 16_000])
    delta = fgd_reference.whole_deltas(free, need, t, base, 1, cpu, np.array([6144]), 1000, 4096, mix)
    assert delta.tolist() == [1000.0]


def test_a_shape_given_in_mib_needs_a_different_share_of_each_device() -> None:
    shape = fgd.Shape(0, 100, 1, gpu_mem_mib=8_000)  # 8 GB and 10% of the cores
    assert shape.need_on(np.array([16_000, 80_000, 4_000])).tolist() == [500, 100, 1000]


def test_a_slot_a_shape_does_not_accept_is_fragmented_for_it() -> None:
    mix = fgd.WorkloadMix((fgd.Shape(0, 500, 1, None, 1.0),))
    free = np.array([[1000, 800]], dtype=np.int64)
    need = np.array([[[500], [NEVER]]], dtype=np.int64)  # the second slot's model is not accepted
    t = fgd.terms(free, need)
    assert (t.count_ge.tolist(), t.small.tolist()) == ([[1]], [[800]])
    cpu, mem = np.array([1000]), np.array([1000])
    assert fgd.frag(t.count_ge, t.small, t.total, cpu, mem, mix).tolist() == [800.0]
    # Half of the accepted slot goes: the shape still fits there, and nothing new is fragmented.
    take = np.array([[500, 0]])
    base = fgd.frag(t.count_ge, t.small, t.total, cpu, mem, mix)
    assert fgd_reference.share_deltas(free, need, t, base, take, cpu, mem, 0, 0, mix).tolist() == [[0.0, 0.0]]


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
def test_the_native_kernel_is_the_numpy_formulas(make_cluster: ClusterFactory, seed: int) -> None:
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
    mix = declared_mix(shapes)
    index = FragmentationIndex(cluster, mix)
    index.sync()
    rows = cluster.live_rows()
    nodes = cluster.node[rows]
    take = rng.integers(1, 1001, rows.size)
    cpu, mem = int(rng.integers(0, 9)) * 1000, int(rng.integers(0, 5)) * 4096
    got = index.share_deltas(rows, take, cpu, mem)
    for k, row in enumerate(rows.tolist()):
        n = np.array([nodes[k]])
        per_slot = np.zeros((1, index.slots.shape[1]), dtype=np.int64)
        per_slot[0, index.slot_of[row]] = take[k]
        t = fgd.FragTerms(index.terms.count_ge[n], index.terms.small[n], index.terms.total[n])
        want = fgd_reference.share_deltas(
            index.free[n], index.need[n], t, index.base[n], per_slot, cluster.node_cpu_free[n],
            cluster.node_mem_free[n], cpu, mem, mix,
        )[0, index.slot_of[row]]
        assert got[k] == pytest.approx(want) or (np.isinf(got[k]) and np.isinf(want))
    all_nodes = np.arange(len(cluster.node_names))
    for count in range(4):
        t = fgd.FragTerms(index.terms.count_ge, index.terms.small, index.terms.total)
        want_whole = fgd_reference.whole_deltas(
            index.free, index.need, t, index.base, count, cluster.node_cpu_free, cluster.node_mem_free, cpu, mem, mix
        )
        assert np.allclose(index.whole_deltas(all_nodes, count, cpu, mem), want_whole)


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
