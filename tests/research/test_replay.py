"""The replay protocol, run through the scoring engine, on tiny hand-made traces with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hami_devices.cli.main import main
from hami_devices.research.replay import replay, trace_mix, unallocated_at
from hami_devices.scheduling import ClusterState, Engine
from hami_devices.simulate.openb import inventory_from_trace, request_for, share_milli
from hami_devices.simulate.protocol import arrival_order
from hami_devices.simulate.trace import load_nodes, load_pods

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,1,T4\nn1,32000,65536,1,P100\n"


def _write(tmp: Path, pods: str, nodes: str = NODES) -> tuple[Path, Path]:
    nodes_csv, pods_csv = tmp / "nodes.csv", tmp / "pods.csv"
    nodes_csv.write_text(nodes)
    pods_csv.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + pods)
    return nodes_csv, pods_csv


POLICIES = ["bestfit", "fragmentation-aware", "binpack", "spread"]


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


@pytest.mark.parametrize("seed", [42, 43, 44, 45, 46, 47])
def test_fragmentation_aware_keeps_a_whole_pair_for_the_two_gpu_task(tmp_path: Path, seed: int) -> None:
    # n0 has one GPU and n1 two.  Two half-GPU tasks and a two-GPU task fill the cluster exactly, in
    # any order, only if both halves share n0's GPU; spreading them breaks n1's pair.
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,1,T4\nn1,32000,65536,2,T4\n"
    nodes_csv, pods_csv = _write(tmp_path, "a,1000,1024,1,500,\nb,1000,1024,1,500,\nc,2000,2048,2,1000,\n", nodes)
    trace_nodes, pods = load_nodes(nodes_csv), load_pods(pods_csv)
    result = replay(trace_nodes, pods, "fragmentation-aware", seed)
    assert result.unallocated_gpu_pct == pytest.approx(0.0)
    halves = {name: uuids for name, uuids in result.placements[:3] if name in "ab"}
    assert halves["a"] == halves["b"] == ("n0-gpu0",)
    spread = [replay(trace_nodes, pods, "spread", s).unallocated_gpu_pct for s in range(42, 48)]
    assert max(spread) > 0.0  # the control: spreading does break the pair for some orders


def test_simulate_places_exactly_as_the_engine(tmp_path: Path) -> None:
    """Nothing in simulate/ decides: its placements are the engine's, arrival by arrival."""
    rng = np.random.default_rng(5)
    rows = []
    for i in range(60):
        num = int(rng.choice([0, 1, 1, 1, 2]))
        milli = int(rng.choice([100, 250, 500, 1000])) if num == 1 else (1000 if num else 0)
        spec = "T4" if rng.random() < 0.2 else ""
        cpu, mem = int(rng.integers(1, 8)) * 1000, int(rng.integers(1, 8)) * 1024
        rows.append(f"p{i:02d},{cpu},{mem},{num},{milli},{spec}\n")
    nodes = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},16000,65536,{2 + i % 3},{'T4' if i % 2 else 'P100'}\n" for i in range(8)
    )
    nodes_csv, pods_csv = _write(tmp_path, "".join(rows), nodes)
    trace_nodes, pods = load_nodes(nodes_csv), load_pods(pods_csv)
    for policy in ("fragmentation-aware", "bestfit"):
        result = replay(trace_nodes, pods, policy, seed=9)
        engine = Engine(ClusterState.from_inventory(inventory_from_trace(trace_nodes)), policy)
        for (name, got), pod in zip(result.placements, arrival_order(pods, trace_nodes.gpu_capacity_milli, 9),
                                    strict=True):
            request = request_for(pods, int(pod))
            engine.observe(request)  # a scheduler's loop: each request it decides teaches the mix
            placement = engine.try_place(request)
            want: tuple[str, ...] = ()
            if placement is not None:
                engine.assume(placement)
                want = tuple(g.uuid for g in placement.grants) or (placement.node,)
            assert (name, got) == (request.name, want)


def test_openb_requests_take_exact_shares(tmp_path: Path) -> None:
    nodes_csv, pods_csv = _write(tmp_path, "a,1000,1024,1,460,\nb,2000,4096,2,1000,T4\nc,3000,1024,0,0,\n")
    pods = load_pods(pods_csv)
    share, whole, host = (request_for(pods, i) for i in range(3))
    assert (share.parts[0].cores, share.parts[0].memory_percent, share_milli(share)) == (46, 46.0, 460)
    assert (whole.parts[0].count, whole.parts[0].exclusive, whole.parts[0].models, share_milli(whole)) == (
        2, True, ["T4"], 2000
    )
    assert host.parts == [] and (host.host_cpu_milli, host.host_memory_mib) == (3000, 1024)
    cluster = ClusterState.from_inventory(inventory_from_trace(load_nodes(nodes_csv)))
    placement = Engine(cluster).schedule(share)
    row = cluster.row(placement.grants[0].uuid)
    assert int(cluster.free_share_milli(np.array([row]))[0]) == 540


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
        ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "bestfit", "--policy",
         "fragmentation-aware", "--seed", "42", "--out", str(out), "--json"]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in summary["results"]] == ["bestfit", "fragmentation-aware"]
    assert all(r["unallocated_gpu_pct"] == 0.0 and r["mix"] == "online" for r in summary["results"])
    curve = json.loads((out / "curve.json").read_text())
    assert len(curve["runs"]) == 2 and curve["runs"][0]["arrived"][-1] >= 1.0
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_refuses_an_unknown_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = _write(tmp_path, "a,1000,1024,1,500,\n")
    assert main(["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd-2", "--out",
                 str(tmp_path)]) == 2
    assert "unknown policy 'fgd-2'" in capsys.readouterr().err


def test_the_declared_mix_carries_median_memory(tmp_path: Path) -> None:
    _, pods_csv = _write(tmp_path, "a,1000,1024,1,500,\nb,1000,4096,1,500,\nc,1000,2048,1,500,\n")
    mix = trace_mix(load_pods(pods_csv))
    assert [(s.gpu_milli, s.mem_mib) for s in mix.shapes] == [(500, 2048)]
