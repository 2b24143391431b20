"""Vendors load only through entry points; a broken plugin is reported and the others still load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hami_devices import load_vendors
from hami_devices.registry import VENDOR_NAMESPACE


def _fake_distribution(site: Path, name: str, entry_points: str, module: str, code: str) -> None:
    """A real installed-distribution layout: dist-info with entry_points.txt, found by importlib.metadata."""
    dist = site / f"{name}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{VENDOR_NAMESPACE}]\n{entry_points}\n")
    (site / f"{module}.py").write_text(code)


def test_builtin_vendors_come_from_entry_points() -> None:
    registry = load_vendors()
    assert {"nvidia", "ascend", "cambricon"} <= set(registry.adapters)
    for name, adapter in registry.adapters.items():
        assert adapter.name == name


def test_plugin_that_raises_on_import_is_reported(tmp_path: Path) -> None:
    _fake_distribution(
        tmp_path, "broken_vendor", "broken = broken_vendor_mod:Adapter", "broken_vendor_mod",
        "raise RuntimeError('driver headers missing')\n",
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "hami_devices.cli.main", "vendors", "--json"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    rows = {row["name"]: row for row in json.loads(out)["vendors"]}
    assert rows["broken"]["loaded"] is False
    assert "RuntimeError: driver headers missing" in rows["broken"]["error"]
    for name in ("nvidia", "ascend", "cambricon"):
        assert rows[name]["loaded"] is True


def test_plugin_that_is_not_an_adapter_is_reported(tmp_path: Path) -> None:
    _fake_distribution(tmp_path, "odd_vendor", "odd = odd_vendor_mod:NotAnAdapter", "odd_vendor_mod",
                       "class NotAnAdapter:\n    def __init__(self, config):\n        pass\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "hami_devices.cli.main", "vendors", "--json"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    rows = {row["name"]: row for row in json.loads(out)["vendors"]}
    assert rows["odd"]["loaded"] is False
    assert "not a VendorAdapter" in rows["odd"]["error"]
