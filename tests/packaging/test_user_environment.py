"""The project's venv is the user's too (the README's first command uses it): no test-only vendor in it."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution

import pytest

from .conftest import REPO, clean_env


def test_the_example_plugin_is_not_installed_here() -> None:
    with pytest.raises(PackageNotFoundError):
        distribution("hami-example-accel")
    run = subprocess.run(
        [sys.executable, "-m", "hami_devices.cli.main", "vendors", "--json"],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=REPO.parent,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    names = {v["name"] for v in json.loads(run.stdout)["vendors"]}
    assert names == {"nvidia", "ascend", "cambricon"}, names
