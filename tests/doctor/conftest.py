"""A node made of the fake vendor libraries ``pip install`` builds, for ``hami-devices doctor``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hami_devices.limiter import fake_library

REPO = Path(__file__).resolve().parents[2]
VENDORS = REPO / "vendors"
BUILT_IN = ("--vendor", "nvidia", "--vendor", "ascend", "--vendor", "cambricon")


@dataclass
class FakeNode:
    env: dict[str, str]
    dev: Path
    ledger: Path
    regions: Path
    tmp: Path

    def doctor(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        """``hami-devices doctor --json`` in a fresh process (each vendor library loads once per process)."""
        proc = subprocess.run(
            [sys.executable, "-m", "hami_devices.cli.main", "doctor", "--json", "--dev-root", str(self.dev), *args],
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.stdout, proc.stderr
        report = json.loads(proc.stdout)
        assert report["exit_code"] == proc.returncode, proc.stderr
        return proc.returncode, report


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["checks"]}


@pytest.fixture
def fake_node(tmp_path: Path) -> FakeNode:
    """NVML, DCMI and CNDev fakes with node fixtures, the fake runtimes found by soname (as a real
    libcuda.so.1 would be), device nodes under a private /dev, and a private ledger and region folder."""
    fakes = fake_library("libcuda.so.1").parent
    fixtures = {
        "nvidia": VENDORS / "nvidia/tests/fixtures/t4-pcie.conf",
        "ascend": VENDORS / "ascend/tests/fixtures/910b3x8.dcmi",
        "cambricon": VENDORS / "cambricon/tests/fixtures/mlu370x8.cndev",
    }
    copies = {}
    for vendor, fixture in fixtures.items():
        copies[vendor] = tmp_path / fixture.name  # the DCMI and CNDev fakes keep state beside their fixture
        shutil.copyfile(fixture, copies[vendor])
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "davinci0", "davinci_manager", "cambricon_dev0"):
        (dev / name).touch(mode=0o666)
    selectors = ("HAMI_", "LD_PRELOAD", "CUDA_DEVICE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(selectors)}
    env.update(
        HAMI_NVML_LIBRARY=str(fake_library("nvml/libnvidia-ml.so.1")),
        HAMI_FAKE_NVML_FIXTURE=str(copies["nvidia"]),
        HAMI_DCMI_LIBRARY=str(fake_library("dcmi/libdcmi.so")),
        HAMI_FAKE_DCMI_FIXTURE=str(copies["ascend"]),
        HAMI_FAKE_DCMI_STATE=str(tmp_path / "dcmi.state"),
        HAMI_CNDEV_LIBRARY=str(fake_library("cndev/libcndev.so")),
        HAMI_FAKE_CNDEV_FIXTURE=str(copies["cambricon"]),
        HAMI_FAKE_CNDEV_STATE=str(tmp_path / "cndev.state"),
        LD_LIBRARY_PATH=os.pathsep.join(p for p in (str(fakes), os.environ.get("LD_LIBRARY_PATH")) if p),
        HAMI_LEDGER=str(tmp_path / "ledger.db"),
        HAMI_REGION_DIR=str(tmp_path / "regions"),
    )
    return FakeNode(env, dev, tmp_path / "ledger.db", tmp_path / "regions", tmp_path)
