"""The replay protocol on tiny hand-made traces with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hami_devices.cli.main import main
from hami_devices.simulate.protocol import arrival_order
from hami_devices.simulate.replay import replay, unallocated_at
from hami_devices.simulate.trace import load_nodes, load_pods

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,1,T4\nn1,32000,65536,1,P100\n"


def _write(tmp: Path, pods: str) -> tuple[Path, Path]:
    nodes_csv, pods_csv = tmp / "nodes.csv", tmp / "pods.csv"
    nodes_csv.write_text(NODES)
    pods_csv.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + pods)
    return nodes_csv, pods_csv


POLICIES = ["bestfit", "fragmentation-aware", "fgd", "binpack", "spread", "random"]


@pytest.mark.parametrize("policy", POLICIES)
def test_model_constraint_strands_half(tmp_path: Path, policy: str) -> None:
    # Both tasks accept only P100; the second fails whatever the order: 50% unallocated at arrived = 100%.
    nodes, pods = _write(tmp_path, "a,1000,1024,1,1000,P100\nb,1000,1024,1,1000,P100\n")
    result = replay(load_nodes(nodes), load_pods(pods), policy, seed=42)
    assert result.unallocated_gpu_pct == pytest.approx(50.0)
    assert result.failed >= 1


@pytest.mark.parametrize("seed", [42, 43, 44, 45])
def test_shares_that_cannot_pair(tmp_path: Path, seed: int) -> None:
    # 600+600 and 600+800 exceed one GPU: each task needs its own GPU, so the third arrival fails
    # and the unallocated share at arrived = 100% is that task's request.
    nodes_csv, pods_csv = _write(tmp_path, "a,1000,1024,1,600,\nb,1000,1024,1,600,\nc,1000,1024,1,800,\n")
    nodes, pods = load_nodes(nodes_csv), load_pods(pods_csv)
    order = arrival_order(pods, nodes.gpu_capacity_milli, seed)
    third = int(pods.gpu_request_milli[order[2]])
    for policy in ("bestfit", "fragmentation-aware"):
        result = replay(nodes, pods, policy, seed)
        assert result.unallocated_gpu_pct == pytest.approx(100.0 * third / 2000)


def test_host_cpu_and_memory_are_limits(tmp_path: Path) -> None:
    nodes, pods = _write(tmp_path, "a,40000,1024,1,1000,\nb,1000,99999999,1,1000,\n")
    result = replay(load_nodes(nodes), load_pods(pods), "bestfit", seed=1)
    assert result.placed == 0 and result.unallocated_gpu_pct == pytest.approx(100.0)


def test_arrival_order_follows_the_protocol(tmp_path: Path) -> None:
    rows = "".join(f"p{i:02d},1000,1024,1,{100 * (i % 9 + 1)},\n" for i in range(20))
    _, pods_csv = _write(tmp_path, rows)
    pods = load_pods(pods_csv)
    capacity = 2000
    order = arrival_order(pods, capacity, seed=7)
    assert sorted(order[:20].tolist()) == list(range(20))  # every original task once, first
    request = pods.gpu_request_milli
    assert int(request[order].sum()) <= 1.3 * capacity or len(order) == 20
    assert (arrival_order(pods, capacity, seed=7) == order).all()
    assert not (arrival_order(pods, capacity, seed=8)[:20] == order[:20]).all()
    # The input's row order does not matter: tasks are sorted by name before the shuffle.
    shuffled = "".join(reversed(rows.splitlines(keepends=True)))
    _, other_csv = _write(tmp_path, shuffled)
    other = load_pods(other_csv)
    names = [pods.names[i] for i in order]
    assert [other.names[i] for i in arrival_order(other, capacity, seed=7)] == names


def test_inflation_appends_copies_up_to_130_percent(tmp_path: Path) -> None:
    nodes_csv, pods_csv = _write(tmp_path, "a,1000,1024,1,100,\nb,1000,1024,1,100,\n")
    nodes, pods = load_nodes(nodes_csv), load_pods(pods_csv)
    order = arrival_order(pods, nodes.gpu_capacity_milli, seed=3)
    assert int(pods.gpu_request_milli[order].sum()) == 2600  # every copy is 100: stops exactly at 130%


def test_metric_is_read_at_arrived_100() -> None:
    arrived = np.array([0.4, 0.8, 1.05, 1.2])
    allocated = np.array([0.4, 0.8, 0.9, 0.95])
    assert unallocated_at(arrived, allocated, 1.0) == pytest.approx(10.0)


def test_cli_writes_curve_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = _write(tmp_path, "a,1000,1024,1,500,\nb,1000,1024,1,500,\nc,1000,1024,1,1000,\n")
    out = tmp_path / "out"
    code = main(
        [
            "simulate",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "bestfit",
            "--policy",
            "fragmentation-aware",
            "--seed",
            "42",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in summary["results"]] == ["bestfit", "fragmentation-aware"]
    assert all(r["unallocated_gpu_pct"] == 0.0 for r in summary["results"])
    curve = json.loads((out / "curve.json").read_text())
    assert len(curve["runs"]) == 2 and curve["runs"][0]["arrived"][-1] >= 1.0
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_typical_mix_carries_median_memory(tmp_path: Path) -> None:
    from hami_devices.simulate.replay import typical_mix

    _, pods_csv = _write(tmp_path, "a,1000,1024,1,500,\nb,1000,4096,1,500,\nc,1000,2048,1,500,\n")
    mix = typical_mix(load_pods(pods_csv))
    assert [s.mem_mib for s in mix.shapes] == [2048]
    assert mix.mem.tolist() == [2048]


def test_host_memory_counts_as_fragmentation() -> None:
    from hami_devices.scheduling import fgd

    mix = fgd.WorkloadMix((fgd.Shape(1000, 1000, 1, None, 1.0, mem_mib=4096),))
    free = np.array([[1000, 1000]], dtype=np.int64)
    cpu = np.array([8000], dtype=np.int64)
    ok = np.ones((1, 1), dtype=bool)
    # Without the memory check the free GPUs are usable; with 2 GiB left they are stranded.
    assert fgd.node_fragmentation(free, cpu, ok, mix).tolist() == [0.0]
    t = fgd.terms(free, mix)
    stranded = fgd._frag(t.count_ge, t.small, t.total, cpu, ok, mix, np.array([2048], dtype=np.int64))
    assert stranded.tolist() == [2000.0]
    # Taking one GPU with a task that leaves too little memory strands the other one.
    base = fgd._frag(t.count_ge, t.small, t.total, cpu, ok, mix, np.array([6144], dtype=np.int64))
    delta = fgd.whole_deltas(cpu, ok, t, base, 1, 1000, mix, np.array([6144], dtype=np.int64), 4096)
    assert delta.tolist() == [1000.0]


def test_stranded_share_is_idle_gpu_the_host_cannot_feed() -> None:
    from hami_devices.simulate.policies import FragmentationAware

    policy = FragmentationAware.__new__(FragmentationAware)
    policy.cpu_per_milli = 10.0  # the trace asks 10 CPU-milli per GPU-milli: 10 cores per whole GPU
    policy.mem_per_milli = 64.0
    gpu, cpu, mem = np.array([2000, 2000]), np.array([10_000, 40_000]), np.array([1 << 30, 1 << 30])
    # 10 cores feed one GPU: of 2 idle GPUs one is stranded; 40 cores feed both.
    assert policy._stranded(gpu, cpu, mem).tolist() == [1000.0, 0.0]
    # A 500-milli task taking 8 cores leaves 1500 idle milli with 2 cores: 1300 stranded, 300 more than before.
    after = policy._stranded(gpu - 500, cpu - 8_000, mem)
    assert (after - policy._stranded(gpu, cpu, mem)).tolist() == [300.0, 0.0]
    # Memory strands the same way.
    assert policy._stranded(np.array([1000]), np.array([40_000]), np.array([32_000])).tolist() == [500.0]
