"""The suite's plumbing: catalog, levels, docs, an inert plugin, reports, the CLI, its error messages, and the
four adapters CI certifies: the three built-ins on simulated devices and on their fake hardware libraries,
and the example third-party plugin with its own limiter shim."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hami_conformance.catalog import Level, level_of, load_catalog, load_levels
from hami_conformance.checks import load_all
from hami_conformance.docs import render
from hami_conformance_testing import (
    BROKEN,
    EXAMPLE,
    HERE,
    certify,
    clean_environment,
    example_installed,
    failures,
    fake_hardware_environment,
    results,
    run_cli,
    run_suite,
)

from hami_devices.adapter import Capability
from hami_devices.cli.main import main as cli

BUILTINS = ("nvidia", "ascend", "cambricon")
FULL = "core+isolation+partitions"
CI_EXAMPLES = "200"
"""The state machine's random sequences in CI: deterministic, so 200 never trip hypothesis's flakiness check."""
HARDWARE_EXAMPLES = "50"
"""Fewer on the fake libraries, where every step reads the library (the simulated runs cover 200)."""


def test_every_catalog_check_has_one_implementation_and_back() -> None:
    ids = [spec.id for spec in load_catalog()]
    assert len(ids) == len(set(ids))
    assert set(load_all()) == set(ids)
    for spec in load_catalog():
        assert spec.level in Level and spec.requirement.endswith(".")
        assert spec.capability is None or spec.capability in Capability


def test_levels_cover_every_must_check_once() -> None:
    names = [level.name for level in load_levels()]
    assert names[0] == "core" and len(names) == len(set(names))
    for spec in load_catalog():
        level = level_of(spec)
        assert spec.capability is None or spec.capability in level.capabilities or level.name == "core"
    by_level = {level.name: [s.id for s in load_catalog() if level_of(s) is level] for level in load_levels()}
    assert "limiter.memory-enforced" in by_level["isolation"] and "partition.no-overlap" in by_level["partitions"]


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
    # N/A is counted apart from pass, and declining the limiter checks earns no isolation level
    must = [c for c in report["checks"] if c["level"] == "MUST"]
    assert report["counts"]["MUST"]["pass"] == sum(c["result"] == "pass" for c in must)
    assert report["counts"]["MUST"]["n/a"] == sum(c["result"] == "n/a" for c in must) > 0
    assert report["certified"] and report["level"] == report["claimed_level"] == "core+partitions"
    levels = {lv["name"]: lv for lv in report["levels"]}
    assert not levels["isolation"]["claimed"] and not levels["isolation"]["earned"]
    root = ET.parse(junit).getroot()
    cases = {case.get("name"): case for case in root.iter("testcase")}
    assert set(cases) == {spec.id for spec in load_catalog()}
    skipped = cases["env.limiter-memory"].find("skipped")
    assert skipped is not None and "capability 'memory-limit' is not declared" in skipped.get("message", "")
    properties = {p.get("name"): p.get("value") for p in root.iter("property") if p.get("name", "").startswith("hami.")}
    assert properties["hami.level"] == "core+partitions" and properties["hami.certified"] == "true"
    table = markdown.read_text()
    assert "**certified at level core+partitions.**" in table
    assert "| isolation | no | no | capability 'memory-limit' is not declared |" in table
    assert "| `env.limiter-memory` | MUST | N/A | capability 'memory-limit' is not declared" in table
    result.stdout.fnmatch_lines(["*level isolation *not claimed*", "*certified at level core+partitions*"])


def test_reports_name_checks_by_catalog_id(tmp_path: Path) -> None:
    proc, report = certify(
        ["--adapter-class", f"{BROKEN}:PlainAdapter", "-v", "-k", "identity", "--examples", "5"],
        clean_environment(),
        tmp_path,
    )
    assert report["adapter"]["name"] == "plainsim", proc.stdout[-2000:]
    assert "hami-conformance::identity.adapter PASSED" in proc.stdout
    assert "catalog.yaml" not in proc.stdout
    cases = list(ET.parse(tmp_path / "out.xml").getroot().iter("testcase"))
    assert {c.get("classname") for c in cases} == {"hami-conformance"}
    assert {c.get("name") for c in cases} == {s.id for s in load_catalog() if s.id.startswith("identity.")}


def test_a_capability_switched_off_by_configuration_is_na_and_earns_no_level(pytester: pytest.Pytester) -> None:
    config = pytester.path / "soft.yaml"
    config.write_text("device-plugin:\n  isolation-level: none\n")
    _, report = run_suite(
        pytester, "--hami-adapter-class", f"{BROKEN}:UnenforcedLimiterAdapter", "--hami-config", str(config)
    )
    verdicts = results(report)
    assert verdicts["env.limiter-memory"] == verdicts["limiter.memory-enforced"] == "n/a"
    assert report["certified"] and not report["full_level"], report["levels"]
    assert report["level"] == "core+partitions" and report["claimed_level"] == "core+isolation+partitions"


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


def _expect_full_level(proc: subprocess.CompletedProcess[str], report: dict[str, object], tmp_path: Path) -> None:
    assert proc.returncode == 0 and report.get("full_level"), failures(report) or proc.stdout[-3000:] + proc.stderr
    assert report["level"] == report["claimed_level"] == FULL
    verdicts = results(report)  # type: ignore[arg-type]
    # a built-in adapter has a limiter shim and the suite ships a harness for its runtime: the
    # limiter check runs in a real process and passes; it never falls back to N/A
    assert verdicts["limiter.memory-enforced"] == "pass"
    assert verdicts["stateful.random-sequences"] == "pass"
    properties = {p.get("name"): p.get("value") for p in ET.parse(tmp_path / "out.xml").getroot().iter("property")}
    assert properties["hami.level"] == FULL
    assert f"certified at level {FULL}" in (tmp_path / "out.md").read_text()


@pytest.mark.parametrize("vendor", BUILTINS)
def test_builtin_vendor_is_certified_on_its_simulated_back_end(vendor: str, tmp_path: Path) -> None:
    proc, report = certify([vendor, "--examples", CI_EXAMPLES], clean_environment(), tmp_path)
    assert report["adapter"]["name"] == vendor and report["adapter"]["backend"].startswith("default-inventory:")
    _expect_full_level(proc, report, tmp_path)
    # inventory devices exist in no library to fail: the MUST fault check is N/A and holds no level back
    assert results(report)["faults.during-run"] == "n/a"


@pytest.mark.parametrize("vendor", BUILTINS)
def test_builtin_vendor_is_certified_on_its_fake_hardware_library(vendor: str, tmp_path: Path) -> None:
    """The real binding code against the fake NVML/DCMI/CNDev, partitions made and destroyed in the fake
    library, and the limiter checks on the fake runtimes."""
    env = fake_hardware_environment(vendor, tmp_path)
    proc, report = certify([vendor, "--examples", HARDWARE_EXAMPLES], env, tmp_path)
    assert report["adapter"]["backend"] == "hardware", proc.stdout[-2000:] + proc.stderr[-2000:]
    _expect_full_level(proc, report, tmp_path)
    # a device lost, unhealthy and failing mid-run through the fake library's fault hook (HAMI_FAKE_FAULTS)
    assert results(report)["faults.during-run"] == "pass"
    if vendor == "nvidia":
        assert results(report)["limiter.compute-share"] == "pass"


def _guide_command(start: str) -> list[str]:
    """The guide's (examples/vendor-plugin/README.md) command line that starts with ``start``, as argv."""
    lines = [line.strip() for line in (EXAMPLE / "README.md").read_text().splitlines()]
    (line,) = [line for line in lines if line.startswith(start)]
    return shlex.split(line.split("#", 1)[0])


def test_example_plugin_is_certified_by_the_guides_pytest_command(tmp_path: Path) -> None:
    """At its full level: its own limiter shim (built by its pip install) enforces memory in a workload
    that its own harness drives; run as the guide's section 4 writes it, the plugin installed."""
    argv = _guide_command("pytest --hami-adapter=example")
    env = {**clean_environment(), "PYTHONPATH": example_installed(tmp_path), "HAMI_CONFORMANCE_EXAMPLES": CI_EXAMPLES}
    proc = subprocess.run(
        [sys.executable, "-m", *argv, "-p", "no:cacheprovider"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    report = json.loads((tmp_path / "conformance.json").read_text())
    assert proc.returncode == 0 and report["full_level"], proc.stdout[-3000:] + proc.stderr[-2000:]
    assert report["adapter"]["name"] == "example" and report["level"] == FULL
    verdicts = results(report)
    assert verdicts["limiter.memory-enforced"] == verdicts["env.limiter-memory"] == "pass"
    assert verdicts["faults.during-run"] == "pass"  # the example's driver implements the fault injector
    assert (tmp_path / "conformance.xml").is_file()


def test_inventory_names_a_plugins_own_models(tmp_path: Path) -> None:
    """``--inventory`` reads the file as discover and schedule do: the plugin's traits_for knows EX-2."""
    inventory = tmp_path / "ex.yaml"
    inventory.write_text(
        "nodes:\n  - name: ex-node\n    devices:\n"
        "      - {vendor: example, model: EX-2, count: 2, link: nvlink}\n"
        "      - {vendor: example, model: EX-1, count: 1}\n"
        "      - {vendor: nvidia, model: T4, count: 1}\n"
    )
    env = {**clean_environment(), "PYTHONPATH": example_installed(tmp_path)}
    proc, report = certify(["example", "--inventory", str(inventory), "--examples", "5"], env, tmp_path)
    assert proc.returncode == 0 and report["certified"], proc.stdout[-3000:] + proc.stderr[-2000:]
    assert report["adapter"]["backend"] == f"inventory:{inventory}"


def test_a_plugin_that_fails_to_import_shows_its_traceback(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "broken_vendor-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-vendor\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[hami_devices.vendors]\nbroken = broken_vendor:Adapter\n")
    (site / "broken_vendor.py").write_text("import hami_devices\nfrom .missing_binding import driver\n")
    env = {**clean_environment(), "PYTHONPATH": str(site)}
    proc = run_cli(["conformance", "broken"], env, tmp_path)
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "broken_vendor.py" in proc.stderr, proc.stderr
    assert "ImportError" in proc.stderr and "broken_vendor:Adapter" in proc.stderr


def test_a_vendor_name_in_other_capitals_is_named_as_such(tmp_path: Path) -> None:
    env = clean_environment()
    proc = run_cli(["conformance", "NVIDIA"], env, tmp_path)
    assert proc.returncode == 2 and "'nvidia' is registered" in proc.stderr and "case-sensitive" in proc.stderr
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("nodes:\n  - name: n\n    devices:\n      - {vendor: Nvidia, model: T4, count: 2}\n")
    proc = run_cli(["conformance", "nvidia", "--inventory", str(inventory)], env, tmp_path)
    assert proc.returncode == 2
    assert "nodes.0.devices.0.vendor is 'Nvidia'" in proc.stderr and "case-sensitive" in proc.stderr


def test_example_plugin_is_found_by_its_entry_point(tmp_path: Path) -> None:
    """As if pip-installed: a dist-info with the entry point, and the guide's ``hami-devices conformance``
    command (section 4; the CI job's is the same without the JSON report) finds "example" by name."""
    argv = _guide_command("hami-devices conformance example")
    ci = _guide_command("- run: hami-devices conformance example")[2:]
    assert set(ci) <= set(argv), "the CI job's command is the tested one less some reports"
    env = {**os.environ, "PYTHONPATH": example_installed(tmp_path), "HAMI_CONFORMANCE_EXAMPLES": "5"}
    proc = subprocess.run(
        [sys.executable, "-m", "hami_devices.cli.main", *argv[1:]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads((tmp_path / "conformance.json").read_text())["adapter"]["plugin"] == "example"
    assert "certified at level" in (tmp_path / "conformance.md").read_text()
