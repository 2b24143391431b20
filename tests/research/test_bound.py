"""The offline bound and packing against exhaustive search on tiny instances.

The oracle below tries every assignment of every task (left out, or on each node and each choice of its
devices) and keeps the most GPU thousandths granted; it shares nothing with the LP code.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest

from hami_devices.errors import InvalidRequest
from hami_devices.research.bound.admission import admission_bound
from hami_devices.research.bound.check import granted_milli
from hami_devices.research.bound.configlp import config_bound
from hami_devices.research.bound.instance import arrived_at_metric, build_instance, instance_for
from hami_devices.research.bound.packing import offline_packing
from hami_devices.simulate.sample import NODE_FILE, SAMPLE_DIR
from hami_devices.simulate.trace import TraceNodes, TracePods, load_nodes, load_pods

Node = tuple[int, int, int, str]  # cpu, memory, devices, model
Task = tuple[int, int, int, int, str]  # cpu, memory, devices, thousandths per device, accepted models ("" any)


def _trace(nodes: list[Node], tasks: list[Task]) -> tuple[TraceNodes, TracePods]:
    models = tuple(sorted({m for *_, m in nodes}))
    trace_nodes = TraceNodes(
        names=tuple(f"n{i}" for i in range(len(nodes))),
        cpu_milli=np.array([n[0] for n in nodes], dtype=np.int64),
        memory_mib=np.array([n[1] for n in nodes], dtype=np.int64),
        gpus=np.array([n[2] for n in nodes], dtype=np.int64),
        model_idx=np.array([models.index(n[3]) for n in nodes], dtype=np.int64),
        models=models,
    )
    pods = TracePods(
        names=tuple(f"t{i}" for i in range(len(tasks))),
        cpu_milli=np.array([t[0] for t in tasks], dtype=np.int64),
        memory_mib=np.array([t[1] for t in tasks], dtype=np.int64),
        num_gpu=np.array([t[2] for t in tasks], dtype=np.int64),
        gpu_milli=np.array([t[3] for t in tasks], dtype=np.int64),
        spec=tuple(frozenset(t[4].split("|")) if t[4] else None for t in tasks),
    )
    return trace_nodes, pods


def brute_force(nodes: list[Node], tasks: list[Task]) -> int:
    """The most GPU thousandths any placement of a subset of ``tasks`` grants (exhaustive)."""
    options: list[list[tuple[int, tuple[int, ...]] | None]] = []
    for _, _, num, _, spec in tasks:
        mine: list[tuple[int, tuple[int, ...]] | None] = [None]
        for n, (_, _, gpus, model) in enumerate(nodes):
            if num == 0 or (spec and model not in spec.split("|")):
                continue
            mine += [(n, devs) for devs in itertools.combinations(range(gpus), num)]
        options.append(mine)
    best = 0
    for choice in itertools.product(*options):
        cpu_used = [0] * len(nodes)
        mem_used = [0] * len(nodes)
        load = [[0] * n[2] for n in nodes]
        exclusive = [[False] * n[2] for n in nodes]
        ok, granted = True, 0
        for (cpu, mem, num, milli, _), where in zip(tasks, choice, strict=True):
            if where is None:
                continue
            n, devs = where
            cpu_used[n] += cpu
            mem_used[n] += mem
            share = milli if num == 1 and milli < 1000 else 1000
            for g in devs:
                if exclusive[n][g] or (share == 1000 and load[n][g] > 0):
                    ok = False
                exclusive[n][g] = exclusive[n][g] or share == 1000
                load[n][g] += share
                ok = ok and load[n][g] <= 1000
            granted += share * len(devs)
        ok = ok and all(cpu_used[n] <= nodes[n][0] and mem_used[n] <= nodes[n][1] for n in range(len(nodes)))
        if ok:
            best = max(best, granted)
    return best


def _solve(nodes: list[Node], tasks: list[Task]) -> tuple[float, int, int]:
    """(bound, offline checked, offline claimed), in granted thousandths."""
    trace_nodes, pods = _trace(nodes, tasks)
    inst = build_instance(trace_nodes, pods, list(range(len(tasks))))
    bound = config_bound(inst, gap_milli=1e-6)
    packing = offline_packing(bound, time_limit_s=10)
    checked = granted_milli(trace_nodes, pods, list(inst.pods), packing.placed)
    return bound.upper_milli, checked, packing.allocated_milli


TIGHT = [
    # one device: 810 alone, or 470 + 470
    ([(8000, 8192, 1, "T4")], [(1000, 1024, 1, 810, ""), (1000, 1024, 1, 470, ""), (1000, 1024, 1, 470, "")], 940),
    # the host CPU lets only one of the two whole-device tasks in; a sharing task takes the other device's share
    ([(8000, 8192, 2, "T4")], [(6000, 1024, 1, 1000, ""), (6000, 1024, 1, 1000, ""), (2000, 1024, 1, 650, "")], 1650),
    # a two-device task needs a node of two free devices; the accepted model leaves it one choice
    ([(8000, 8192, 2, "T4"), (8000, 8192, 2, "P100")],
     [(1000, 1024, 2, 1000, "P100"), (1000, 1024, 1, 500, "P100"), (1000, 1024, 1, 500, "T4")], 2500),
]


@pytest.mark.parametrize(("nodes", "tasks", "optimum"), TIGHT)
def test_bound_and_offline_equal_the_optimum_where_the_relaxation_is_tight(
    nodes: list[Node], tasks: list[Task], optimum: int
) -> None:
    assert brute_force(nodes, tasks) == optimum
    bound, checked, claimed = _solve(nodes, tasks)
    assert bound == pytest.approx(optimum, abs=1e-6)
    assert checked == claimed == optimum


@pytest.mark.parametrize("seed", range(12))
def test_never_below_the_optimum_on_random_tiny_instances(seed: int) -> None:
    rng = random.Random(seed)
    models = ["T4", "P100"]
    nodes = [(rng.choice([4000, 8000]), rng.choice([8192, 16384]), rng.choice([1, 2]), rng.choice(models))
             for _ in range(2)]
    tasks: list[Task] = []
    for _ in range(rng.randint(3, 5)):
        num = rng.choice([1, 1, 1, 2])
        milli = rng.choice([250, 470, 500, 810, 1000]) if num == 1 else 1000
        spec = rng.choice(["", "", "T4", "P100"])
        tasks.append((rng.choice([1000, 2000, 4000]), rng.choice([1024, 4096, 8192]), num, milli, spec))
    optimum = brute_force(nodes, tasks)
    bound, checked, claimed = _solve(nodes, tasks)
    assert bound >= optimum - 1e-6  # never below the true optimum: the bound on unallocated never above it
    assert checked == claimed <= optimum


def test_checker_refuses_an_overfull_device() -> None:
    trace_nodes, pods = _trace([(8000, 8192, 1, "T4")], [(1000, 1024, 1, 600, ""), (1000, 1024, 1, 600, "")])
    with pytest.raises(InvalidRequest, match="over 1000"):
        granted_milli(trace_nodes, pods, [0, 1], {0: (0, ((0, 600),)), 1: (0, ((0, 600),))})
    with pytest.raises(InvalidRequest, match="asked"):
        granted_milli(trace_nodes, pods, [0, 1], {0: (0, ((0, 1000),))})


def test_instance_stops_where_the_replay_reads_the_metric(tmp_path: Path) -> None:
    nodes = load_nodes(SAMPLE_DIR / NODE_FILE)
    pods = load_pods(SAMPLE_DIR / "openb_pod_list_default.csv")
    arrivals = arrived_at_metric(pods, nodes.gpu_capacity_milli, 42)
    asked = [int(pods.num_gpu[p]) * (int(pods.gpu_milli[p]) if pods.num_gpu[p] == 1 else 1000) for p in arrivals]
    assert sum(asked) >= nodes.gpu_capacity_milli > sum(asked[:-1])
    inst = instance_for(nodes, pods, 42)
    assert inst.arrived_milli == sum(asked)
    assert sum(c.count for c in inst.classes) == sum(1 for p in arrivals if pods.num_gpu[p] > 0)


def best_compliant(nodes: list[Node], tasks: list[Task]) -> int:
    """The most thousandths granted by any run that places, in order, every task that fits somewhere
    (every choice of where tried; a task is left out only when it fits nowhere)."""

    def fits(state: tuple[list[int], list[int], list[list[int]]], n: int, devs: tuple[int, ...], task: Task) -> bool:
        cpu_used, mem_used, load = state
        cpu, mem, num, milli, _ = task
        share = milli if num == 1 and milli < 1000 else 1000
        if cpu_used[n] + cpu > nodes[n][0] or mem_used[n] + mem > nodes[n][1]:
            return False
        return all(load[n][g] == 0 if share == 1000 else load[n][g] + share <= 1000 for g in devs)

    def run(k: int, state: tuple[list[int], list[int], list[list[int]]]) -> int:
        if k == len(tasks):
            return 0
        task = tasks[k]
        cpu, mem, num, milli, spec = task
        share = milli if num == 1 and milli < 1000 else 1000
        choices = [(n, devs) for n, (_, _, gpus, model) in enumerate(nodes)
                   if num > 0 and not (spec and model not in spec.split("|"))
                   for devs in itertools.combinations(range(gpus), num) if fits(state, n, devs, task)]
        if not choices:
            return run(k + 1, state)
        best = 0
        for n, devs in choices:
            cpu_used, mem_used, load = state
            nxt = ([*cpu_used], [*mem_used], [[*row] for row in load])
            nxt[0][n] += cpu
            nxt[1][n] += mem
            for g in devs:
                nxt[2][n][g] += share if share < 1000 else 1000
            best = max(best, share * num + run(k + 1, nxt))
        return best

    return run(0, ([0] * len(nodes), [0] * len(nodes), [[0] * n[2] for n in nodes]))


def test_admission_bound_holds_the_rule_a_plain_bound_does_not() -> None:
    # A light 810 arrives before a whole-device task on one device: under the rule the 810 is placed
    # (it fits), so the whole-device task finds nothing; leaving the 810 out would grant 1000.
    nodes = [(8000, 8192, 1, "T4")]
    tasks = [(1000, 1024, 1, 810, ""), (4000, 4096, 1, 1000, "")]
    assert brute_force(nodes, tasks) == 1000
    assert best_compliant(nodes, tasks) == 810
    trace_nodes, pods = _trace(nodes, tasks)
    inst = build_instance(trace_nodes, pods, [0, 1])
    assert config_bound(inst, gap_milli=1e-6).upper_milli == pytest.approx(1000)
    assert admission_bound(inst, cuts_from_end=(0,)).upper_milli == pytest.approx(810)


@pytest.mark.parametrize("seed", range(10))
def test_admission_bound_never_below_a_compliant_run(seed: int) -> None:
    rng = random.Random(1000 + seed)
    nodes = [(rng.choice([4000, 8000]), 16384, rng.choice([1, 2]), "T4") for _ in range(2)]
    tasks: list[Task] = []
    for _ in range(rng.randint(4, 6)):
        num = rng.choice([1, 1, 1, 2])
        milli = rng.choice([300, 470, 810, 810, 1000]) if num == 1 else 1000
        tasks.append((rng.choice([1000, 2000, 3000]), rng.choice([1024, 4096]), num, milli, ""))
    if not any(t[2] == 1 and t[3] < 1000 for t in tasks):
        tasks.append((1000, 1024, 1, 810, ""))
    compliant = best_compliant(nodes, tasks)
    trace_nodes, pods = _trace(nodes, tasks)
    inst = build_instance(trace_nodes, pods, list(range(len(tasks))))
    bound = admission_bound(inst, cuts_from_end=(0, 1, 2))
    assert bound.upper_milli >= compliant - 1e-6
    assert bound.upper_milli <= config_bound(inst, gap_milli=1e-6).upper_milli + 1e-6
