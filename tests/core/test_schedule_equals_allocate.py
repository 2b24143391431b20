"""``hami-devices schedule`` and ``hd.allocate`` give identical grants, task by task.

The CLI books each placement in its engine's cluster state; ``hd.allocate``
commits each into a ledger and builds its engine from the devices and the
ledger every time.  Under every example configuration and every built-in
policy, the two must grant the same devices, memory, cores and partitions to
every task of the example workload, and refuse the same tasks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import hami_devices as hd
from hami_devices.cli.main import main
from hami_devices.config import HamiConfig, load_config
from hami_devices.ledger import MemoryLedger
from hami_devices.plugin import Grant
from hami_devices.scheduler import load_workload
from hami_devices.scheduling.policies import BUILTIN

from ..conftest import EXAMPLES

CONFIGS = [None, *sorted(p.name for p in EXAMPLES.glob("config-*.yaml"))]


def _share(grant: dict[str, Any] | Grant) -> tuple[Any, ...]:
    g = grant if isinstance(grant, dict) else grant.model_dump(mode="json")
    return (g["uuid"], g["part"], g["memory_mib"], g["cores"], g["exclusive"], g["partition"])


@pytest.mark.parametrize("config_name", CONFIGS)
def test_schedule_and_allocate_grant_the_same(
    config_name: str | None, example_inventory: Path, example_workload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_args = ["--config", str(EXAMPLES / config_name)] if config_name else []
    config = load_config(EXAMPLES / config_name) if config_name else HamiConfig()
    for policy in BUILTIN:
        main(["schedule", "--inventory", str(example_inventory), "--workload", str(example_workload),
              "--policy", policy, "--json", *config_args])
        scheduled = json.loads(capsys.readouterr().out)["results"]
        devices = hd.discover(example_inventory, config=config, ledger=MemoryLedger())
        for task, request in zip(scheduled, load_workload(example_workload), strict=True):
            assert task["task"] == request.name
            try:
                handle = hd.allocate(devices, request, policy=policy)
            except hd.InsufficientResources:
                assert not task["placed"], f"{policy}: {request.name} was scheduled but not granted"
                continue
            assert task["placed"], f"{policy}: {request.name} was granted but not scheduled"
            assert [_share(g) for g in handle.grants] == [_share(g) for g in task["grants"]], (policy, request.name)


def test_every_task_of_the_example_is_placed_by_default(
    example_inventory: Path, example_workload: Path
) -> None:
    devices = hd.discover(example_inventory, ledger=MemoryLedger())
    handles = [hd.allocate(devices, request) for request in load_workload(example_workload)]
    assert len(handles) == 16
