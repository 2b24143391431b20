"""A guarantee given only on a scoped key (``devices@train: 4``) entitles its queue: a task whose parts can
only use devices of that scope reclaims them from a borrower, as a plain ``devices`` guarantee would."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_devices.queueing.loop import AdmissionLoop
from hami_devices.queueing.spec import parse_queues

INVENTORY = """\
nodes:
  - {name: a100, cpu_milli: 64000, memory_mib: 262144, devices: [{vendor: nvidia, model: A100-80GB, count: 4}]}
  - {name: t4, cpu_milli: 64000, memory_mib: 262144, devices: [{vendor: nvidia, model: T4, count: 4}]}
"""
PREEMPTIVE = {"scheduler": {"resource-allocation": {"enable-preemptive": True}}}
WHOLE_A100 = {"parts": [{"cores": 100, "models": ["A100-80GB"]}]}


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scoped") / "inventory.yaml"
    path.write_text(INVENTORY)
    return path


def loop_with(inventory: Path, guarantee: dict[str, int]) -> AdmissionLoop:
    queues = parse_queues({"classes": {"train": {"models": ["A100-80GB"]}},
                           "queues": [{"name": "prod", "guarantee": guarantee}, {"name": "batch"}]})
    loop = AdmissionLoop.from_config(inventory, queues, PREEMPTIVE)
    for i in range(8):  # batch borrows every card, A100 and T4
        request = {"queue": "batch", "preemptible": True, "parts": [{"cores": 100}]}
        loop.submit(request, name=f"batch-{i}", now=0)
    loop.tick(now=0)
    assert all(t.state == "running" for t in loop.tasks.values())
    return loop


@pytest.mark.parametrize("guarantee", [{"devices@train": 4}, {"device-cores@train": 400}, {"devices": 4}])
def test_a_task_within_the_scope_reclaims_its_guarantee(inventory: Path, guarantee: dict[str, int]) -> None:
    loop = loop_with(inventory, guarantee)
    loop.submit({"queue": "prod", **WHOLE_A100}, name="prod-0", now=10)
    events = loop.tick(now=10)
    assert loop.tasks["prod-0"].state == "running", [(e.kind, e.task, e.detail) for e in events]
    evicted = [e.task for e in events if e.kind == "evicted"]
    assert len(evicted) == 1
    victim = loop.tasks[evicted[0]]
    assert victim.queue == loop.tasks["batch-0"].queue  # taken back from the borrower
    placed = loop.tasks["prod-0"].placement
    assert placed is not None and [g.model for g in placed.grants] == ["A100-80GB"]
    assert victim.placement is not None and victim.placement.grants[0].uuid == placed.grants[0].uuid


def test_a_scoped_guarantee_covers_only_tasks_confined_to_its_scope(inventory: Path) -> None:
    loop = loop_with(inventory, {"devices@train": 4})
    # may land on a T4, outside the scope: not entitled by devices@train, so it waits as a borrower
    loop.submit({"queue": "prod", "parts": [{"cores": 100}]}, name="anywhere", now=10)
    events = loop.tick(now=10)
    assert loop.tasks["anywhere"].state == "pending"
    assert [e.reason for e in events if e.task == "anywhere"] == ["no-capacity"]
