"""The research subpackage stands apart: the core runs without its extra, the old paths forward with a warning,
and the research code without its solver says which extra to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import hami_devices.research.bound.configlp as configlp
import hami_devices.research.defrag.milp as milp
from hami_devices.errors import InvalidConfig
from hami_devices.scheduling.defrag.plan import greedy, planner

# Run in a fresh interpreter where highspy cannot be imported (as in an install without the extra).
WITHOUT_SOLVER = textwrap.dedent(
    """
    import sys
    sys.modules["highspy"] = None  # an import of it fails as an absent module's does

    import hami_devices, hami_devices.scheduling, hami_devices.simulate
    assert not [m for m in sys.modules if m.startswith("hami_devices.research")], "the core loaded research"

    import numpy as np
    from hami_devices.errors import MissingExtra
    from hami_devices.research.bound.configlp import config_bound
    from hami_devices.research.bound.instance import build_instance
    from hami_devices.simulate.trace import TraceNodes, TracePods

    one = np.array([1], dtype=np.int64)
    nodes = TraceNodes(names=("n0",), cpu_milli=one * 8000, memory_mib=one * 8192, gpus=one,
                       model_idx=one * 0, models=("T4",))
    pods = TracePods(names=("t0",), cpu_milli=one * 1000, memory_mib=one * 1024, num_gpu=one,
                     gpu_milli=one * 500, spec=(None,))
    try:
        config_bound(build_instance(nodes, pods, [0]))
    except MissingExtra as exc:
        print(exc.extra, exc.module)

    # the defragmenter's greedy planner is the core's; asking for the milp one names the extra
    from hami_devices.inventory import Inventory, NodeSpec
    from hami_devices.models import DeviceInfo, ResourceRequest
    from hami_devices.scheduling.cluster import ClusterState
    from hami_devices.scheduling.defrag.report import plan_moves
    from hami_devices.scheduling.engine import Engine
    from hami_devices.scheduling.fgd import Shape, WorkloadMix

    devices = [DeviceInfo(uuid=f"g{g}", index=g, vendor="nvidia", model="T4", node="n0", memory_mib=16000)
               for g in range(2)]
    node = NodeSpec(name="n0", cpu_milli=64000, memory_mib=262144, devices=devices)
    cluster = ClusterState.from_inventory(Inventory(nodes=[node], source="test"))
    engine = Engine(cluster, "binpack")
    for g in range(2):  # a 30 % share on each device: emptying one is worth a move
        mask = np.zeros(cluster.size, dtype=bool)
        mask[cluster.row(f"g{g}")] = True
        share = ResourceRequest(name=f"s{g}", preemptible=True, host_cpu_milli=1000, host_memory_mib=1024,
                                parts=[{"count": 1, "cores": 30, "memory_percent": 30}])
        engine.assume(engine.try_place(share, candidates=[mask]))
    whole = WorkloadMix((Shape(0, 1000, 1, None, 1.0),))
    print(plan_moves(cluster, whole, 2, solver="greedy").method)
    assert not [m for m in sys.modules if m.startswith("hami_devices.research.defrag")], "greedy loaded research"
    try:
        plan_moves(cluster, whole, 2, solver="milp")
    except MissingExtra as exc:
        print(exc.extra, exc.module)
    """
)


def test_the_core_runs_without_the_research_extra_and_research_names_it() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_SOLVER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["research", "highspy", "greedy", "research", "highspy"]


def test_an_old_path_forwards_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"hami_devices\.research\.bound\.configlp"):
        from hami_devices.simulate.bound.configlp import config_bound
    assert config_bound is configlp.config_bound


def test_an_old_path_has_no_name_its_new_home_lacks() -> None:
    import hami_devices.simulate.bound.configlp as old

    with pytest.warns(DeprecationWarning), pytest.raises(AttributeError):
        _ = old.no_such_name


def test_the_old_milp_path_forwards_to_research() -> None:
    with pytest.warns(DeprecationWarning, match=r"hami_devices\.research\.defrag\.milp"):
        from hami_devices.scheduling.defrag.milp import solve
    assert solve is milp.solve


def test_planners_by_name() -> None:
    assert planner("greedy") is greedy
    with pytest.raises(InvalidConfig, match="solver"):
        planner("simplex")


def test_the_replay_is_still_found_where_it_was() -> None:
    import hami_devices.research.replay as research_replay

    with pytest.warns(DeprecationWarning, match=r"hami_devices\.research\.replay"):
        from hami_devices.simulate import replay
    with pytest.warns(DeprecationWarning, match=r"hami_devices\.research\.timed"):
        from hami_devices.simulate.timed import replay_timed
    assert replay is research_replay.replay
    assert replay_timed.__module__ == "hami_devices.research.timed"
