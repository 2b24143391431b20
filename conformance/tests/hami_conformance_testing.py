"""Helpers of the conformance suite's own tests (a unique module name: every tests folder has a conftest)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from hami_devices.limiter import fake_library

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BROKEN = HERE / "hami_broken_adapters.py"
EXAMPLE = REPO / "examples" / "vendor-plugin"
FIXTURES = HERE / "fixtures"

FAKE_BACKENDS: dict[str, tuple[str, str, str, str | None, str]] = {
    # vendor: (library variable, fake library, fixture variable, state variable, fixture)
    "nvidia": ("HAMI_NVML_LIBRARY", "nvml/libnvidia-ml.so.1", "HAMI_FAKE_NVML_FIXTURE", None, "nvidia-node.conf"),
    "ascend": (
        "HAMI_DCMI_LIBRARY",
        "dcmi/libdcmi.so",
        "HAMI_FAKE_DCMI_FIXTURE",
        "HAMI_FAKE_DCMI_STATE",
        "ascend-node.dcmi",
    ),
    "cambricon": (
        "HAMI_CNDEV_LIBRARY",
        "cndev/libcndev.so",
        "HAMI_FAKE_CNDEV_FIXTURE",
        "HAMI_FAKE_CNDEV_STATE",
        "cambricon-node.cndev",
    ),
}
"""How each built-in vendor runs on its fake hardware library: what `pip install` built, and a node fixture."""


def run_suite(pytester: pytest.Pytester, *options: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run the suite in-process with ``options``; return pytest's result and the JSON report."""
    report = pytester.path / "conformance.json"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--hami-examples", "5", "--hami-report", str(report), *options
    )
    data = json.loads(report.read_text()) if report.is_file() else {}
    return result, data


def results(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["result"] for c in report["checks"]}


def clean_environment() -> dict[str, str]:
    """This process's environment without any vendor library or fake-hardware selection."""
    selectors = ("HAMI_FAKE_", "HAMI_NVML", "HAMI_DCMI", "HAMI_CNDEV", "HAMI_REGION_DIR", "HAMI_CONFORMANCE_")
    return {k: v for k, v in os.environ.items() if not k.startswith(selectors)}


def fake_hardware_environment(vendor: str, tmp_path: Path) -> dict[str, str]:
    """Select ``vendor``'s fake library and a private copy of its node fixture (state lives beside it)."""
    library_var, library, fixture_var, state_var, fixture = FAKE_BACKENDS[vendor]
    copy = tmp_path / fixture
    shutil.copyfile(FIXTURES / fixture, copy)
    env = clean_environment()
    env[library_var] = str(fake_library(library))
    env[fixture_var] = str(copy)
    if state_var:
        env[state_var] = str(tmp_path / f"{fixture}.state")
    return env


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``hami-devices ARGS`` in a fresh process (each vendor library is loaded once per process)."""
    return subprocess.run(
        [sys.executable, "-m", "hami_devices.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
        timeout=600,
    )


def certify(args: list[str], env: dict[str, str], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Any]:
    """``hami-devices conformance ARGS`` with JSON, JUnit and Markdown reports; returns (process, JSON report)."""
    report = tmp_path / "out.json"
    proc = run_cli(
        [
            "conformance",
            *args,
            "--report",
            str(report),
            "--junit-xml",
            str(tmp_path / "out.xml"),
            "--markdown",
            str(tmp_path / "out.md"),
        ],
        env,
        tmp_path,
    )
    data = json.loads(report.read_text()) if report.is_file() else {}
    return proc, data


def failures(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["reason"] for c in report.get("checks", []) if c["result"] == "fail"}


def example_installed(tmp_path: Path) -> str:
    """A PYTHONPATH that installs the example plugin for one subprocess, as pip would: its folder and a
    dist-info declaring its entry points.  The project's own environment never has it installed (a user's
    ``hami-devices vendors`` must not list a fake vendor); its shim is built by scripts/test.sh."""
    site = tmp_path / "example-site"
    dist = site / "hami_example_accel-1.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hami-example-accel\nVersion: 1.0.0\n")
    declared = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]["entry-points"]
    lines = [f"{name} = {target}" for name, target in declared["hami_devices.vendors"].items()]
    (dist / "entry_points.txt").write_text("[hami_devices.vendors]\n" + "\n".join(lines) + "\n")
    return os.pathsep.join([str(site), str(EXAMPLE)])
