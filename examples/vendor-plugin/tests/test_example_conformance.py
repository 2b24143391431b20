"""The plugin's own CI: the hami-devices conformance suite must certify the adapter.

Installed (``pip install -e .``), the suite finds the adapter by its entry point;
from a plain checkout it is named by class.
"""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

import hami_example_accel
import pytest
from hami_example_accel import ExampleAdapter

from hami_devices import limiter, load_vendors
from hami_devices.plugin import Capability


def _suite_target() -> list[str]:
    installed = any(ep.name == "example" for ep in entry_points(group="hami_devices.vendors"))
    if installed:
        return ["--hami-adapter", "example"]
    return ["--hami-adapter-class", "hami_example_accel.adapter:ExampleAdapter"]


def test_the_conformance_suite_certifies_the_adapter(pytester: pytest.Pytester) -> None:
    report = pytester.path / "conformance.json"
    result = pytester.runpytest(*_suite_target(), "--hami-report", str(report), "-p", "no:cacheprovider")
    data = json.loads(report.read_text())
    assert data["certified"], result.stdout.str()[-3000:]
    assert result.ret == 0
    # certified at every level its capabilities claim, the limiter proven with this package's own shim
    assert data["full_level"] and data["level"] == "core+isolation+partitions", data["levels"]
    verdicts = {c["id"]: c["result"] for c in data["checks"]}
    assert verdicts["limiter.memory-enforced"] == "pass"
    # faults made in the Example Runtime through its fault hook (EXRT_FAULTS), met by the adapter mid-run
    assert verdicts["faults.during-run"] == "pass", verdicts
    na = {c["id"]: c["reason"] for c in data["checks"] if c["result"] == "n/a"}
    assert all("not declared" in reason for reason in na.values()), na  # declined only through capabilities


def test_the_limiter_shim_lives_in_this_package() -> None:
    shim = limiter.shim_library(ExampleAdapter.limiter_shim or "")
    package = Path(hami_example_accel.__file__).resolve().parent
    assert shim.is_file() and shim.is_relative_to(package), shim


def test_the_entry_point_loads_when_installed() -> None:
    if not any(ep.name == "example" for ep in entry_points(group="hami_devices.vendors")):
        pytest.skip("not installed: pip install ./examples/vendor-plugin")
    adapter = load_vendors(["example"]).get("example")
    assert isinstance(adapter, ExampleAdapter)
    assert Capability.PARTITIONS in adapter.capabilities


def test_no_devices_without_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAMI_EXAMPLE_DEVICES", raising=False)
    probe = ExampleAdapter().probe()
    assert not probe.available and "HAMI_EXAMPLE_DEVICES" in probe.detail
