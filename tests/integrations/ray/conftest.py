"""A real local Ray cluster for the Ray tests: one head per module, on the fake NVIDIA libraries.

The head's processes (raylet, runtime-env agent, workers) inherit this process's environment:
the fake NVML (discovery), the fake libcuda by soname (the workloads), one fake-GPU state file
shared by every process, a private region folder, and a fresh durable ledger.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray  # the [ray] extra, which scripts/test.sh installs: a missing Ray fails here, never skips

from hami_devices import limiter
from hami_devices.device import Device
from hami_devices.integrations import ray as hray
from hami_devices.ledger import SqliteLedger
from tests.conftest import REPO_ROOT

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "one-t4.conf"
FAKE_NVML = Path(limiter.fake_library("libcuda.so.1")).parent / "nvml" / "libnvidia-ml.so.1"
GPU_MIB = 15360


@dataclass
class RayNode:
    folder: Path
    ledger: SqliteLedger
    regions: Path

    def devices(self) -> list[Device]:
        """The node's devices as the plugin sees them (same discovery, same ledger)."""
        return hray.NodeSetup.from_env().devices(self.ledger)


@pytest.fixture(scope="module")
def ray_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayNode]:
    folder = tmp_path_factory.mktemp("ray")
    regions = folder / "regions"
    regions.mkdir()
    saved = dict(os.environ)
    os.environ.update(
        {
            "HAMI_NVML_LIBRARY": str(FAKE_NVML),
            "HAMI_FAKE_NVML_FIXTURE": str(FIXTURE),
            "HAMI_FAKE_GPU_STATE": str(folder / "fakegpu"),
            "HAMI_FAKE_MEMORY_MIB": str(GPU_MIB),
            "LD_LIBRARY_PATH": str(FAKE_NVML.parent.parent),
            "HAMI_REGION_DIR": str(regions),
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
            "RAY_AUTH_MODE": "disabled",  # no token written to the user's home
            "RAY_USAGE_STATS_ENABLED": "0",
        }
    )
    os.environ.pop("LD_PRELOAD", None)
    ledger = folder / "ledger.db"
    # Ray's sockets live in its temp folder, and a socket's path may not pass 107 bytes: pytest's folder under an
    # xdist worker (.../pytest-N/popen-gwK/ray0/...) leaves too little for Ray's session names
    sessions = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    try:
        hray.init(
            ledger=ledger,
            vendors=["nvidia"],
            num_cpus=4,
            num_gpus=0,  # the fake NVML is visible to Ray's own GPU detection too; shares are hami's
            include_dashboard=False,
            _temp_dir=sessions,
            logging_level="warning",
        )
        yield RayNode(folder=folder, ledger=SqliteLedger(ledger), regions=regions)
    finally:
        ray.shutdown()
        shutil.rmtree(sessions, ignore_errors=True)
        os.environ.clear()
        os.environ.update(saved)
