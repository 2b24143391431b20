"""Migration with and without a checkpoint, on a real process that saves and restores its own state."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from hami_devices.errors import HamiError, InvalidRequest
from hami_devices.scheduling.defrag.checkpoint import ProcessCheckpointer, wait_for
from tests.queueing.helpers import cluster, gpu, kinds, make_loop

WORKLOAD = [sys.executable, str(Path(__file__).with_name("counter_workload.py"))]


def _progress(folder: Path, task: str) -> int:
    path = folder / f"{task}.state.progress"
    return int(path.read_text() or 0) if path.exists() else 0


def _run_until(folder: Path, task: str, count: int) -> None:
    deadline = time.monotonic() + 60
    while _progress(folder, task) < count:
        assert time.monotonic() < deadline, "the workload made no progress"
        time.sleep(0.02)


def test_a_checkpointed_move_resumes_where_it_stopped(tmp_path: Path) -> None:
    hooks = ProcessCheckpointer(tmp_path)
    hooks.start("train", WORKLOAD, {"CUDA_VISIBLE_DEVICES": "0"})
    wait_for(tmp_path / "train.state.ready", 60)
    _run_until(tmp_path, "train", 20)
    assert hooks.checkpointable("train")
    state = hooks.checkpoint("train")  # SIGTERM: the process saves its count and exits 0
    saved = int(Path(state).read_text())
    assert saved >= 20
    (tmp_path / "train.state.ready").unlink()
    hooks.restore("train", state, {"CUDA_VISIBLE_DEVICES": "1"})  # on the new device
    wait_for(tmp_path / "train.state.ready", 60)
    assert int((tmp_path / "train.state.ready").read_text()) == saved  # resumed from its own state: no work lost
    _run_until(tmp_path, "train", saved + 5)
    hooks.stop("train")


def test_a_move_without_checkpoint_starts_from_scratch(tmp_path: Path) -> None:
    hooks = ProcessCheckpointer(tmp_path)
    hooks.start("infer", WORKLOAD, checkpointable=False)
    wait_for(tmp_path / "infer.state.ready", 60)
    _run_until(tmp_path, "infer", 20)
    assert not hooks.checkpointable("infer")
    lost = _progress(tmp_path, "infer")
    hooks.stop("infer")
    (tmp_path / "infer.state.ready").unlink()
    hooks.restart("infer", {})
    wait_for(tmp_path / "infer.state.ready", 60)
    assert int((tmp_path / "infer.state.ready").read_text()) == 0  # everything it had done is lost
    assert lost >= 20
    hooks.stop("infer")


def test_a_workload_that_does_not_save_is_reported(tmp_path: Path) -> None:
    hooks = ProcessCheckpointer(tmp_path, timeout_s=5)
    hooks.start("bad", [sys.executable, "-c", "import time; time.sleep(30)"])
    with pytest.raises(HamiError, match="without writing its state"):
        hooks.checkpoint("bad")  # the default SIGTERM kills it before it saves anything
    with pytest.raises(InvalidRequest, match="task"):
        hooks.checkpoint("unknown")
    with pytest.raises(InvalidRequest, match="argv"):
        hooks.start("empty", [])


def test_a_queue_eviction_checkpoints_and_the_next_admission_restores(tmp_path: Path) -> None:
    hooks = ProcessCheckpointer(tmp_path)
    queues = {"queues": [{"name": "online", "guarantee": {"device-cores": 100}}, {"name": "research"}]}
    loop, log = make_loop(cluster(("n", "T4", 1)), queues, checkpoints=hooks)
    loop.submit(gpu("job", "research", preemptible=True, recomputable=True), now=0)
    loop.tick(0)
    hooks.start("job", WORKLOAD)
    wait_for(tmp_path / "job.state.ready", 60)
    _run_until(tmp_path, "job", 20)
    loop.submit(gpu("serve", "online"), now=10)
    loop.tick(10)  # online reclaims its guarantee: the research job is checkpointed, not killed
    evicted = kinds(log, "evicted")
    assert [e.task for e in evicted] == ["job"]
    assert evicted[0].data["checkpointed"] is True and evicted[0].data["lost_device_seconds"] == 0.0
    saved = int((tmp_path / "job.state").read_text())
    (tmp_path / "job.state.ready").unlink()
    loop.finish("serve", now=20)
    loop.tick(20)  # re-admitted: restored from its own state
    wait_for(tmp_path / "job.state.ready", 60)
    assert int((tmp_path / "job.state.ready").read_text()) == saved
    hooks.stop("job")
