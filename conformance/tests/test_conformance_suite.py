"""The suite's plumbing: catalog, docs, an inert plugin, reports, the CLI, and the four adapters CI certifies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hami_conformance.catalog import Level, load_catalog
from hami_conformance.checks import load_all
from hami_conformance.docs import render
from hami_conformance_testing import BROKEN, EXAMPLE, HERE, results, run_suite

from hami_devices.adapter import Capability
from hami_devices.cli.main import main as cli

BUILTINS = ("nvidia", "ascend", "cambricon")


def test_every_catalog_check_has_one_implementation_and_back() -> None:
    ids = [spec.id for spec in load_catalog()]
    assert len(ids) == len(set(ids))
    assert set(load_all()) == set(ids)
    for spec in load_catalog():
        assert spec.level in Level and spec.requirement.endswith(".")
        assert spec.capability is None or spec.capability in Capability


def test_checks_md_is_generated_from_the_catalog() -> None:
    assert (HERE.parent / "CHECKS.md").read_text() == render(), "run: python -m hami_conformance.docs > CHECKS.md"


def test_plugin_is_inert_without_its_options(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "hami-conformance" not in result.stdout.str()
    probe = "import sys, hami_conformance.plugin; print(sorted(m for m in sys.modules if m.startswith('hami_')))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "hami_devices" not in loaded and "hami_conformance.session" not in loaded


def test_unknown_adapter_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--hami-adapter", "no-such-vendor")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*hami-conformance*no-such-vendor*"])


def test_undeclared_capabilities_are_na_with_reason_in_every_report(pytester: pytest.Pytester) -> None:
    junit = pytester.path / "out.xml"
    markdown = pytester.path / "out.md"
    result, report = run_suite(
        pytester,
        "--hami-adapter-class",
        f"{BROKEN}:PlainAdapter",
        "--junitxml",
        str(junit),
        "--hami-markdown",
        str(markdown),
    )
    assert result.ret == 0
    assert report["suite_version"] and report["adapter"]["name"] == "plainsim"
    assert report["adapter"]["version"] == "0.0.1" and report["counts"]["MUST"]["n/a"] >= 1
    na = {c["id"]: c["reason"] for c in report["checks"] if c["result"] == "n/a"}
    assert "capability 'memory-limit' is not declared" in na["env.limiter-memory"]
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    assert set(cases) == {spec.id for spec in load_catalog()}
    skipped = cases["env.limiter-memory"].find("skipped")
    assert skipped is not None and "capability 'memory-limit' is not declared" in skipped.get("message", "")
    table = markdown.read_text()
    assert "| `env.limiter-memory` | MUST | N/A | capability 'memory-limit' is not declared" in table


def test_cli_exits_non_zero_when_a_must_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.json"
    code = cli(
        [
            "conformance",
            "--adapter-class",
            f"{BROKEN}:DoubleFreeAdapter",
            "--report",
            str(report),
            "-k",
            "release or handle",
        ]
    )
    assert code == 1
    assert results(json.loads(report.read_text()))["release.double-raises"] == "fail"
    assert cli(["conformance"]) == 2
    capsys.readouterr()


@pytest.mark.parametrize("vendor", BUILTINS)
def test_builtin_vendor_is_certified_on_its_simulated_back_end(vendor: str, tmp_path: Path) -> None:
    junit, report = tmp_path / "out.xml", tmp_path / "out.json"
    env = {**os.environ, "HAMI_CONFORMANCE_EXAMPLES": "8"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hami_devices.cli.main",
            "conformance",
            vendor,
            "--junit-xml",
            str(junit),
            "--report",
            str(report),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    data = json.loads(report.read_text())
    failed = {c["id"]: c["reason"] for c in data["checks"] if c["result"] == "fail" and c["level"] == "MUST"}
    assert proc.returncode == 0 and not failed, failed or proc.stdout[-2000:]
    assert data["adapter"]["name"] == vendor and junit.is_file()
    # every built-in adapter has a limiter shim and the suite ships a workload for its runtime:
    # the limiter check runs in a real process and passes; it must never fall back to N/A
    verdicts = results(data)
    assert verdicts["limiter.memory-enforced"] == "pass", data["checks"]


def test_example_plugin_is_certified_by_class(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    result, report = run_suite(pytester, "--hami-adapter-class", "hami_example_accel.adapter:ExampleAdapter")
    assert result.ret == 0 and report["certified"], result.stdout.str()[-3000:]
    assert report["adapter"]["name"] == "example"


def test_example_plugin_is_found_by_its_entry_point(tmp_path: Path) -> None:
    """As if pip-installed: a dist-info with the entry point, and the CLI finds "example" by name."""
    site = tmp_path / "site"
    dist = site / "hami_example_accel-1.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hami-example-accel\nVersion: 1.0.0\n")
    declared = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]["entry-points"]
    lines = [f"{name} = {target}" for name, target in declared["hami_devices.vendors"].items()]
    (dist / "entry_points.txt").write_text("[hami_devices.vendors]\n" + "\n".join(lines) + "\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLE)]), "HAMI_CONFORMANCE_EXAMPLES": "5"}
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "hami_devices.cli.main", "conformance", "example", "--report", str(report)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(report.read_text())["adapter"]["plugin"] == "example"
