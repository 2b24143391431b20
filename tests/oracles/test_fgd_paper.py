"""The fragmentation-aware policy against FGD's definition, computed from scratch from the raw free shares.

The workload mix is declared through the configuration (``scheduler.workload-mix``,
mode ``declared``), the cluster is built and filled through the public API, and
the oracle (``fgd_paper``) computes each node's expected fragmentation from the
devices' free shares as the documentation defines them.  Compared with:

* the fragmentation the SDK reports per node (``scheduling.fragmentation.node_fragmentation``,
  the documented metric, for the engine's mix);
* the rise the policy scores each candidate with, read from the public
  ``Placement.breakdown`` (documented encoding ``50 x gate + 0.49 x score + 0.4 x tie``,
  ``score = int(100 x sigmoid(-rise / 1000))``, where a share's rise also counts ``fgd_paper.WASTE_WEIGHT`` (10)
  times its node's rise of expected end waste, ``fgd_paper.node_end_waste``) of every node's best
  placement (``Engine.rank``), and the policy's choice, which must be in the best score.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import hami_devices as hd
from hami_devices.scheduler import ClusterState, Engine, Placement, configure_engine
from hami_devices.scheduling import fgd
from hami_devices.scheduling.fragmentation import node_fragmentation as reported_fragmentation
from tests.oracles import fgd_paper
from tests.oracles import placement_rules as rules
from tests.oracles.placement_rules import Dev, Held, Host, World
from tests.oracles.worlds import Drawn, Model, free_milli

FGD_SETTINGS = settings(max_examples=int(os.environ.get("FGDN", "150")), deadline=None, derandomize=True, database=None)
# Memories that are whole thousands of MiB: every share a test asks is a whole number of thousandths.
FGD_MODELS = (
    Model("nvidia", "T4", 16_000, frozenset({"fp32", "fp16", "int8"})),
    Model("nvidia", "A10", 24_000, frozenset({"fp32", "fp16", "bf16", "int8"})),
    Model("nvidia", "V100", 32_000, frozenset({"fp32", "fp16"})),
)


@st.composite
def fgd_worlds(draw: Any, *, hosts_spare: bool = False) -> Drawn:
    world = World([], [], {}, Fraction(1), 100)
    drawn = Drawn(world)
    for n in range(draw(st.integers(1, 3))):
        name = f"n{n}"
        cpu, mem = draw(st.sampled_from([4_000, 32_000])), draw(st.sampled_from([8_192, 65_536]))
        low = 1 if hosts_spare else 0  # a host left with nothing would strand its share (not FGD's term)
        used = (draw(st.integers(0, 4)) * cpu // 4, draw(st.integers(0, 4)) * mem // 4)
        used = (min(used[0], cpu - low), min(used[1], mem - low))
        world.hosts.append(Host(name, cpu, mem, used[0], used[1]))
        drawn.host_use[name] = used
        for i in range(draw(st.integers(1, 4))):
            model = draw(st.sampled_from(FGD_MODELS))
            dev = Dev(f"{name}-{i}", name, i, model.vendor, model.name, model.memory_mib, 10, (model.name,),
                      healthy=draw(st.integers(0, 9)) > 0, precisions=model.precisions)
            world.devices.append(dev)
            drawn.models[dev.uuid] = model
            kind = draw(st.sampled_from(["empty", "empty", "share", "share", "exclusive"]))
            grants: list[tuple[int, int, bool, str | None]]
            if kind == "exclusive":
                grants = [(model.memory_mib, 100, True, None)]
            elif kind == "share":
                unit = model.memory_mib // 1000
                grants = [(draw(st.integers(0, 1000)) * unit, draw(st.integers(0, 100)), False, None)]
            else:
                grants = []
            if grants:
                drawn.grants[dev.uuid] = grants
                world.held[dev.uuid] = Held(grants[0][0], grants[0][1], 1, grants[0][2])
    return drawn


@st.composite
def mixes(draw: Any, world: World, *, constrained: bool = True, host_share: bool = True) -> list[dict[str, Any]]:
    """Shapes whose needs sit on the world's edges: a device's free share, a host's free CPU and memory."""
    free = sorted({free_milli(world, d) for d in world.devices} - {0})
    shapes = []
    for _ in range(draw(st.integers(1, 4))):
        num = draw(st.sampled_from([0, 1, 1, 1, 2]))
        shape: dict[str, Any] = {"num-gpu": num, "weight": draw(st.sampled_from([1, 2, 5]))}
        shape["gpu-milli"] = 1000 if num > 1 else (0 if num == 0 else draw(st.sampled_from([100, 500, 1000, *free])))
        if host_share or num == 0:
            host = draw(st.sampled_from(world.hosts))
            shape["cpu-milli"] = draw(st.sampled_from([0, 1_000, host.cpu_free]))
            shape["host-memory-mib"] = draw(st.sampled_from([0, 4_096, host.mem_free]))
        if num and constrained and draw(st.integers(0, 3)) == 0:
            shape["models"] = [draw(st.sampled_from(["T4", "a10", "V-100"]))]
        if num == 1 and draw(st.integers(0, 3)) == 0:  # some larger than the smallest devices
            shape["gpu-mem-mib"] = draw(st.sampled_from([4_000, 12_000, 24_000]))
        shapes.append(shape)
    return shapes


def oracle_mix(shapes: list[dict[str, Any]]) -> list[fgd_paper.TaskShape]:
    return [
        fgd_paper.TaskShape(
            cpu_milli=s.get("cpu-milli", 0),
            gpu_milli=s["gpu-milli"],
            num_gpu=s["num-gpu"],
            weight=float(s["weight"]),
            host_memory_mib=s.get("host-memory-mib", 0),
            gpu_mem_mib=s.get("gpu-mem-mib", 0),
            models=frozenset(rules.model_key(m) for m in s["models"]) if "models" in s else None,
        )
        for s in shapes
    ]


def engine_with_mix(cluster: ClusterState, shapes: list[dict[str, Any]]) -> Engine:
    config = hd.HamiConfig.model_validate(
        {"scheduler": {"policy": "fragmentation-aware", "workload-mix": {"mode": "declared", "shapes": shapes}}}
    )
    return configure_engine(cluster, config)


def fragmentation_of(world: World, node: str, mix: list[fgd_paper.TaskShape]) -> float:
    gpus = [
        fgd_paper.Gpu(free_milli(world, d), frozenset(d.names()), world.memory_capacity(d)) for d in world.on(node)
    ]
    host = world.host(node)
    return fgd_paper.node_fragmentation(gpus, host.cpu_free, host.mem_free, mix)


def after(world: World, uuid: str, share: rules.Share) -> World:
    """The world once ``share`` is granted on ``uuid``."""
    held = world.usage(uuid)
    grown = Held(held.memory_mib + share.memory_mib, held.cores + share.cores, held.sharers + 1,
                 held.exclusive or share.exclusive, held.partitions)
    return World(world.hosts, world.devices, {**world.held, uuid: grown}, world.memory_factor, world.core_capacity)


@FGD_SETTINGS
@given(st.data())
def test_each_node_reports_the_papers_fragmentation(data: Any) -> None:
    drawn = data.draw(fgd_worlds())
    shapes = data.draw(mixes(drawn.world))
    cluster = drawn.cluster()
    engine = engine_with_mix(cluster, shapes)
    mix = oracle_mix(shapes)
    reported = reported_fragmentation(cluster, engine.mix)
    for host in drawn.world.hosts:
        assert reported[host.name] == pytest.approx(fragmentation_of(drawn.world, host.name, mix), abs=1e-6)


def end_waste_of(world: World, node: str, mix: list[fgd_paper.TaskShape]) -> float:
    """The node's expected end waste (the request asks no host share: the host's free share is the world's)."""
    host = next(h for h in world.hosts if h.name == node)
    gpus = [
        fgd_paper.Gpu(free_milli(world, d), frozenset(d.names()), world.memory_capacity(d))
        for d in world.devices
        if d.node == node
    ]
    return fgd_paper.node_end_waste(gpus, mix, host.cpu_free, host.mem_free)


def fragmentation_score(placement: Placement) -> int:
    """The FGD score inside the documented encoding (no model constraint: every candidate passes the gate)."""
    value = placement.breakdown["fragmentation"]
    assert value >= 50.0, "without model constraints every candidate passes the gate"
    return math.floor((value - 50.0) / 0.49 + 1e-6)


@FGD_SETTINGS
@given(st.data())
def test_the_policy_scores_each_candidate_by_its_rise_and_picks_the_least(data: Any) -> None:
    """Shares of cores and of memory drawn apart (or a whole device): the rise of F_n is exact."""
    drawn = data.draw(fgd_worlds(hosts_spare=True))
    shapes = data.draw(mixes(drawn.world, constrained=False, host_share=False))
    share = data.draw(st.sampled_from([10, 25, 40, 50, 100]))
    part: dict[str, Any] = {"count": 1, "cores": share}
    if share < 100 or data.draw(st.booleans()):
        part["memory_percent"] = float(data.draw(st.sampled_from([share, 5, 10, 30, 50, 80])))
    request = hd.ResourceRequest(task_type="batch", parts=[part])
    world, mix = drawn.world, oracle_mix(shapes)
    engine = engine_with_mix(drawn.cluster(), shapes)
    rises: dict[str, float] = {}
    for _, ((uuid,),) in rules.feasible(world, request):
        node = world.device(uuid).node
        granted = rules.usable(world, request.parts[0], world.device(uuid))
        assert granted is not None
        grown = after(world, uuid, granted)
        rises[uuid] = fragmentation_of(grown, node, mix) - fragmentation_of(world, node, mix)
        if not request.parts[0].exclusive:  # a share also adds its node's rise of expected end waste
            rises[uuid] += fgd_paper.WASTE_WEIGHT * (end_waste_of(grown, node, mix) - end_waste_of(world, node, mix))
    ranked = engine.rank(request, limit=len(world.hosts))
    assert {p.grants[0].uuid for p in ranked} <= set(rises)
    assert bool(ranked) == bool(rises)
    for placement in ranked:
        uuid = placement.grants[0].uuid
        assert fragmentation_score(placement) in fgd_paper.fgd_score_range(rises[uuid]), (uuid, rises[uuid])
    event(f"candidates: {len(rises)}, distinct scores: {len({fgd_paper.fgd_score(r) for r in rises.values()})}")
    if rises:
        chosen = engine.place(request).grants[0].uuid
        best = max(fgd_paper.fgd_score(r) for r in rises.values())
        assert max(fgd_paper.fgd_score_range(rises[chosen])) >= best, (chosen, rises)


def test_a_gap_is_filled_by_the_shape_that_leaves_it_least() -> None:
    """By hand, from the README's definition: a mix of 470s and 320s, equally common (rho = 1 for any gap
    either fits).  A lone 470's gap of 530 ends at 60 if the next 470 fills it, at 210 if a 320 does
    (nothing fits 60 or 210); the filler is drawn by popularity times exp(-W / 15), so the 320 is
    e^-10 as likely and W(530) is 60 and a hair, not the 135 a draw by popularity alone would give."""

    snug = math.exp(-150 / 15)
    expected = (60 + 210 * snug) / (1 + snug)
    gpu = fgd_paper.Gpu(0, memory_capacity=16_000)
    mix = [fgd_paper.TaskShape(gpu_milli=470), fgd_paper.TaskShape(gpu_milli=320)]
    assert fgd_paper.end_waste(530, gpu, mix, fgd_paper.FILL_SHARE) == pytest.approx(expected, abs=1e-9)
    need, weight = np.array([[470, 320]]), np.array([0.5, 0.5])
    assert fgd.gap_waste(need, weight)[0][530] == pytest.approx(expected, abs=1e-9)
    # Without the preference (an infinite temperature) it is the popularity-weighted mean.
    assert fgd.gap_waste(need, weight, temperature=math.inf)[0][530] == pytest.approx(135.0)
