"""Helpers for the NVIDIA tests: run the real adapter against the fake NVML in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import hami_devices

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
LIBS = Path(hami_devices.__path__[0]).resolve() / "libs" / "fakes"
FAKE_NVML = LIBS / "nvml" / "libnvidia-ml.so.1"
FAKE_NVML_OLD = LIBS / "nvml-old" / "libnvidia-ml.so.1"
CLI = [sys.executable, "-m", "hami_devices.cli.main"]


def nvml_env(fixture: str | Path, library: Path = FAKE_NVML) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAMI_FAKE_", "HAMI_NVML"))}
    env["HAMI_NVML_LIBRARY"] = str(library)
    env["HAMI_FAKE_NVML_FIXTURE"] = str(fixture if Path(fixture).is_absolute() else FIXTURES / fixture)
    return env


def run_json(args: list[str], env: dict[str, str]) -> Any:
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


def discover(fixture: str | Path, library: Path = FAKE_NVML, config: Path | None = None) -> list[dict[str, Any]]:
    """``hami-devices discover --vendor nvidia --json`` against a fixture (with ``--config`` if given)."""
    extra = ["--config", str(config)] if config is not None else []
    out = run_json([*CLI, "discover", "--vendor", "nvidia", "--json", *extra], nvml_env(fixture, library))
    devices: list[dict[str, Any]] = out["devices"]
    return devices


def scenario(name: str, arg: str, fixture: str | Path, library: Path = FAKE_NVML) -> Any:
    return run_json([sys.executable, str(HERE / "nvidia_scenarios.py"), name, arg], nvml_env(fixture, library))
