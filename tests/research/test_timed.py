"""The timed replay with departures, and defragmentation rounds in it, on hand-made traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_devices.research.timed import replay_timed
from hami_devices.scheduling.defrag.controller import DefragOptions
from hami_devices.simulate.trace import load_nodes, load_pods

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,1,T4\nn1,32000,65536,1,T4\n"
HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


def _trace(tmp: Path, rows: str) -> tuple[Path, Path]:
    nodes, pods = tmp / "nodes.csv", tmp / "pods.csv"
    nodes.write_text(NODES)
    pods.write_text(HEADER + rows)
    return nodes, pods


def test_departures_free_capacity_in_time_order(tmp_path: Path) -> None:
    nodes, pods = _trace(
        tmp_path,
        "a,1000,1024,1,1000,,LS,Running,0,10,0\n"
        "b,1000,1024,1,1000,,LS,Running,5,20,5\n"
        "c,1000,1024,1,1000,,LS,Running,12,30,12\n",
    )
    result = replay_timed(load_nodes(nodes), load_pods(pods), "binpack", stretch=1.0, scale=1.0, sample_every_s=1)
    assert (result.placed, result.failed) == (3, 0)  # c arrives after a has left
    longer = replay_timed(load_nodes(nodes), load_pods(pods), "binpack", stretch=2.0, scale=1.0, sample_every_s=1)
    assert (longer.placed, longer.failed) == (2, 1)  # a now leaves at 20: no GPU for c at 12
    assert longer.failed_gpu_milli == 1000
    assert max(longer.samples_allocated) == pytest.approx(1.0)


def test_a_defragmentation_round_frees_a_whole_gpu(tmp_path: Path) -> None:
    # Spread puts the two preemptible halves on different GPUs; the whole-GPU task then fits only if a
    # defragmentation round has moved one half next to the other.
    nodes, pods = _trace(
        tmp_path,
        "x,1000,1024,1,500,,BE,Running,0,100,0\n"
        "y,1000,1024,1,500,,BE,Running,1,100,1\n"
        "z,1000,1024,1,1000,,LS,Running,50,60,50\n",
    )
    common = {"stretch": 1.0, "scale": 1.0, "sample_every_s": 5.0}
    plain = replay_timed(load_nodes(nodes), load_pods(pods), "spread", **common)  # type: ignore[arg-type]
    assert (plain.failed, plain.moves) == (1, 0)
    # every task is running (3 with z) so a budget of a third per hour allows one move
    options = DefragOptions(share_per_hour=0.5, on_threshold=False)
    defrag = replay_timed(load_nodes(nodes), load_pods(pods), "spread", defrag=options, **common)  # type: ignore[arg-type]
    assert (defrag.failed, defrag.moves) == (0, 1)
    assert defrag.defrag["moves_within_budget"] is True
    assert defrag.fragmentation_at_last_arrival <= plain.fragmentation_at_last_arrival


def test_a_trace_without_times_is_refused(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES)
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,1000\n")
    with pytest.raises(ValueError, match="creation/deletion"):
        replay_timed(load_nodes(nodes), load_pods(pods), "binpack")
