"""``hami-devices doctor`` on a node of fake vendor libraries: everything passes, and each failure a
deployment meets (library missing, shim missing or not limiting, unsafe region folder, corrupt ledger,
bad configuration) is provoked for real and named."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from hami_devices.ledger import SCHEMA_VERSION, SqliteLedger
from hami_devices.models import DeviceHandle, ResourceRequest

from .conftest import BUILT_IN, REPO, FakeNode, by_id

EXAMPLE = REPO / "examples" / "vendor-plugin"


def _statuses(report: dict[str, object]) -> dict[str, str]:
    return {c["id"]: c["status"] for c in by_id(report).values()}


def test_everything_passes_on_the_fake_libraries(fake_node: FakeNode) -> None:
    code, report = fake_node.doctor(*BUILT_IN)
    assert code == 0 and report["status"] == "PASS", [c for c in report["checks"] if c["status"] != "PASS"]
    checks = by_id(report)
    shims = {"nvidia": "libhami_cuda.so", "ascend": "libhami_ascend.so", "cambricon": "libhami_cambricon.so"}
    for vendor, shim in shims.items():
        assert checks[f"vendor.{vendor}.library"]["status"] == "PASS"
        assert checks[f"vendor.{vendor}.device-nodes"]["status"] == "PASS"
        assert "preloads cleanly" in checks[f"limiter.{shim}.load"]["why"]
        assert "refused with the runtime's out-of-memory error" in checks[f"limiter.{shim}.effective"]["why"]
    assert "535.161.08" in checks["vendor.nvidia.library"]["why"]  # the fixture's driver, through NVML
    assert {"sdk.native", "limiter.region-dir", "ledger", "config", "context.container"} <= set(checks)
    assert report["counts"] == {"PASS": len(checks), "WARN": 0, "FAIL": 0}


def test_a_missing_library_fails_and_says_which(fake_node: FakeNode) -> None:
    env = {**fake_node.env, "HAMI_NVML_LIBRARY": str(fake_node.tmp / "nowhere" / "libnvidia-ml.so.1")}
    code, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe", env=env)
    check = by_id(report)["vendor.nvidia.library"]
    assert code == 2 and check["status"] == "FAIL"
    assert "HAMI_NVML_LIBRARY=" in check["why"] and "nowhere" in check["why"] and check["action"]
    # without the override, device nodes with no library behind them fail too
    env.pop("HAMI_NVML_LIBRARY")
    code, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe", env=env)
    check = by_id(report)["vendor.nvidia.library"]
    assert code == 2 and check["status"] == "FAIL" and "device node(s) (nvidia0, nvidia1)" in check["why"]


def test_no_device_nodes_under_a_library_that_answers_warns(fake_node: FakeNode) -> None:
    for node in fake_node.dev.iterdir():
        node.unlink()
    code, report = fake_node.doctor("--vendor", "cambricon", "--no-limiter-probe")
    assert code == 1 and by_id(report)["vendor.cambricon.device-nodes"]["status"] == "WARN"


def _plugin(tmp: Path, entry: str, source: str | None = None) -> str:
    """A PYTHONPATH that installs one vendor plugin for a subprocess (a dist-info with its entry point)."""
    site = tmp / "site"
    dist = site / "doctor_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: doctor-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[hami_devices.vendors]\n{entry}\n")
    if source:
        (site / "doctor_plugin.py").write_text(source)
    return os.pathsep.join([str(site), str(EXAMPLE), str(REPO / "conformance" / "tests")])


NO_SHIM = """
from typing import ClassVar
from hami_devices.adapter import Probe, VendorAdapter

class NoShimAdapter(VendorAdapter):
    name: ClassVar[str] = "noshim"
    limiter_shim: ClassVar[str | None] = "libhami_noshim.so"

    def probe(self) -> Probe:
        return Probe(True, "noshim runtime 1.0, 1 device", library="builtin")

    def discover(self, ledger):
        return []
"""


def test_a_shim_that_is_not_built_fails(fake_node: FakeNode) -> None:
    env = {**fake_node.env, "PYTHONPATH": _plugin(fake_node.tmp, "noshim = doctor_plugin:NoShimAdapter", NO_SHIM)}
    code, report = fake_node.doctor("--vendor", "noshim", env=env)
    check = by_id(report)["limiter.libhami_noshim.so.built"]
    assert code == 2 and check["status"] == "FAIL"
    assert "libhami_noshim.so is not built" in check["why"] and "(used by noshim)" in check["why"]
    assert "reinstall" in check["action"]


def test_a_plugin_shim_is_proven_with_its_own_harness_and_one_that_does_not_limit_fails(fake_node: FakeNode) -> None:
    env = {**fake_node.env, "HAMI_EXAMPLE_DEVICES": "2"}
    env["PYTHONPATH"] = _plugin(fake_node.tmp / "good", "example = hami_example_accel.adapter:ExampleAdapter")
    code, report = fake_node.doctor("--vendor", "example", env=env)
    assert code == 0, report["checks"]
    assert "refused" in by_id(report)["limiter.libhami_example.so.effective"]["why"]

    env["PYTHONPATH"] = _plugin(fake_node.tmp / "bad", "example = hami_broken_plugin_shim:PassThroughShimAdapter")
    code, report = fake_node.doctor("--vendor", "example", env=env)
    check = by_id(report)["limiter.libexrt.so.effective"]
    assert code == 2 and check["status"] == "FAIL" and "does not limit" in check["why"], check


def test_an_unsafe_region_folder_fails(fake_node: FakeNode) -> None:
    fake_node.regions.mkdir()
    fake_node.regions.chmod(0o777)
    code, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe")
    check = by_id(report)["limiter.region-dir"]
    assert code == 2 and check["status"] == "FAIL"
    assert "writable by others (mode 0777)" in check["why"] and f"chmod 700 {fake_node.regions}" in check["action"]


def _ledger_with_allocations(path: Path, count: int) -> None:
    ledger = SqliteLedger(path)
    with ledger.transaction() as view:
        for i in range(count):
            view.add(DeviceHandle(id=f"a{i:04d}", request=ResourceRequest(parts=[], host_cpu_milli=100), grants=[]))
    ledger.close()


def test_a_healthy_ledger_passes_and_a_corrupt_one_fails(fake_node: FakeNode) -> None:
    _ledger_with_allocations(fake_node.ledger, 300)
    code, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe")
    check = by_id(report)["ledger"]
    assert code == 0 and f"schema version {SCHEMA_VERSION}" in check["why"] and "300 allocation(s)" in check["why"]

    # damage b-tree pages in the middle of the file: sqlite opens it, integrity_check finds it out
    with sqlite3.connect(fake_node.ledger) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    data = bytearray(fake_node.ledger.read_bytes())
    assert len(data) > 6 * page
    for offset in range(3 * page + 8, 5 * page, 7):
        data[offset] = 0xA5
    fake_node.ledger.write_bytes(bytes(data))
    code, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe")
    check = by_id(report)["ledger"]
    assert code == 2 and check["status"] == "FAIL", check
    assert str(fake_node.ledger) in check["why"] and ".corrupt" in check["action"]


def test_a_file_that_is_no_database_and_a_newer_schema_fail(fake_node: FakeNode) -> None:
    fake_node.ledger.write_bytes(b"this is not a ledger\n" * 400)
    code, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe")
    check = by_id(report)["ledger"]
    assert code == 2 and "not a readable ledger" in check["why"] and "not a database" in check["why"]

    fake_node.ledger.unlink()
    _ledger_with_allocations(fake_node.ledger, 1)
    with sqlite3.connect(fake_node.ledger) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    code, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe")
    check = by_id(report)["ledger"]
    assert code == 2 and f"schema version {SCHEMA_VERSION + 1}" in check["why"] and "upgrade" in check["action"]


def test_an_invalid_configuration_is_named(fake_node: FakeNode) -> None:
    config = fake_node.tmp / "config.yaml"
    config.write_text("scheduler:\n  policy: binpack\ndevice-plugin:\n  memory-overcommit: -2\n")
    code, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe", "--config", str(config))
    check = by_id(report)["config"]
    assert code == 2 and check["status"] == "FAIL"
    assert "memory-overcommit" in check["why"] and str(config) in check["why"]
    config.write_text("scheduler:\n  policy: spread\n")
    code, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe", "--config", str(config))
    assert code == 0 and "policy spread" in by_id(report)["config"]["why"]


def test_node_config_applies_to_the_hardware_and_doctor_shows_it(fake_node: FakeNode) -> None:
    """The fake NVML's four T4s, selected as node ``gpu-7`` (``NODE_NAME``): GPU 1 filtered out, the rest
    with the node's split count and scaled memory and cores."""
    config = fake_node.tmp / "config.yaml"
    config.write_text("node-config:\n  - name: gpu-[0-9]\n    split-count: 2\n    memory-scaling: 1.5\n"
                      "    core-scaling: 2\n    filter-devices: {indexes: [1]}\n")
    env = {**fake_node.env, "NODE_NAME": "gpu-7"}
    _, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe", "--config", str(config), env=env)
    check = by_id(report)["config.node-config"]
    assert check["status"] == "PASS" and "gpu-7: memory-scaling 1.5, core-scaling 2, split-count 2" in check["why"]
    (node,) = check["detail"]["nodes"].values()
    assert node["name"] == "gpu-7" and len(node["filtered"]) == 1 and len(node["devices"]) == 3
    assert {(d["split-count"], d["memory-mib"], d["cores"]) for d in node["devices"].values()} == {(2, 23040, 200)}
    _, report = fake_node.doctor("--vendor", "nvidia", "--no-limiter-probe", "--config", str(config),
                                 env={**fake_node.env, "NODE_NAME": "cpu-1"})
    assert by_id(report)["config.node-config"]["status"] == "WARN"  # no entry selects this node


def test_the_table_shows_why_and_what_to_do(fake_node: FakeNode) -> None:
    import subprocess
    import sys

    fake_node.regions.mkdir()
    fake_node.regions.chmod(0o757)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hami_devices.cli.main",
            "doctor",
            "--vendor",
            "nvidia",
            "--no-limiter-probe",
            "--dev-root",
            str(fake_node.dev),
        ],
        env=fake_node.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stdout.splitlines()
    failing = next(i for i, line in enumerate(lines) if line.startswith("FAIL") and "limiter.region-dir" in line)
    assert "-> chmod 700" in lines[failing + 1]
    assert lines[-1].startswith("doctor: ") and "1 fail" in lines[-1]
