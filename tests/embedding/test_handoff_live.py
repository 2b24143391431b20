"""``unprepare`` never pulls a region from under a running workload: a real workload process (fake libcuda, the
shipped CUDA shim) started with the environment ``prepare`` gave is named, and only ``force`` removes it."""

from __future__ import annotations

from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices.errors import AllocationInUse
from hami_devices.handoff import prepare, unprepare
from tests.core.test_release_live import Session
from tests.limiter.conftest import Drivers, drivers, wenv
from tests.limiter.helpers import Env

__all__ = ["drivers", "wenv"]


def test_unprepare_refuses_while_the_workload_runs(
    drivers: Drivers, wenv: Env, small_inventory: Path, tmp_path: Path
) -> None:
    ledger = hd.SqliteLedger(tmp_path / "ledger.db")
    handle = hd.build_engine(small_inventory, ledger=ledger).allocate({"parts": [{"memory_mib": 64, "cores": 30}]})
    node = handle.grants[0].node
    env = prepare(handle.id, ledger, node=node)[f"{node}/nvidia"]
    session = Session({**wenv.build(shim=None), **env})
    try:
        assert session.alloc(16) == 0  # the node's region keeps its limit: 64 MiB
        assert session.alloc(128) != 0
        with pytest.raises(AllocationInUse) as refused:
            unprepare(handle.id, node=node)
        assert refused.value.pids == [str(session.proc.pid)]
        assert Path(env["HAMI_REGION_PATH"]).exists()
        assert unprepare(handle.id, node=node, force=True) == [env["HAMI_REGION_PATH"]]
    finally:
        session.stop()
