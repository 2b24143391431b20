"""Issue 40: each bug class the suite once missed has a broken adapter, refused by the check named for it.

Each adapter runs only the check that names its class (``-k``), so this file stays quick; the control
adapter's full runs (test_conformance_teeth.py, test_conformance_suite.py) show those checks pass a
correct adapter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hami_broken_adapters import CLASSES
from hami_conformance.checks import load_all
from hami_conformance.session import ConformanceSession  # noqa: F401  (imported once, not per in-process run)
from hami_conformance_testing import (
    BROKEN,
    certify,
    clean_environment,
    failures,
    fake_hardware_environment,
    results,
    run_suite,
)

load_all()


@pytest.mark.parametrize("adapter", sorted(CLASSES))
def test_the_check_named_for_a_bug_class_refuses_its_adapter(pytester: pytest.Pytester, adapter: str) -> None:
    check, bug = CLASSES[adapter]
    result, report = run_suite(pytester, "--hami-adapter-class", f"{BROKEN}:{adapter}", "-k", check)
    verdicts = results(report)
    assert verdicts[check] == "fail", f"{adapter} {bug}, yet {check} did not fail: {verdicts}"
    (entry,) = [c for c in report["checks"] if c["id"] == check]
    assert entry["reason"]
    if entry["level"] == "MUST":
        assert result.ret != 0 and check in report["must_failed"]
    result.stdout.fnmatch_lines([f"*FAIL {check} [[]{entry['level']}[]]*"])


def test_the_control_passes_each_of_those_checks(pytester: pytest.Pytester) -> None:
    """The plain control with the fault injector of its (in-process) library, so no check is N/A."""
    checks = sorted({check for check, _ in CLASSES.values()})
    control = f"{BROKEN}:FaultAwareAdapter"
    result, report = run_suite(pytester, "--hami-adapter-class", control, "-k", " or ".join(checks))
    assert {results(report)[c] for c in checks} == {"pass"}, result.stdout.str()[-2000:]


def test_without_a_fault_injector_the_fault_check_is_na_with_the_reason(pytester: pytest.Pytester) -> None:
    _, report = run_suite(pytester, "--hami-adapter-class", f"{BROKEN}:PlainAdapter", "-k", "faults")
    (entry,) = [c for c in report["checks"] if c["id"] == "faults.during-run"]
    assert entry["result"] == "n/a" and "Profile.faults" in entry["reason"]


def test_a_misspelt_shim_fails_once_early_listing_the_shims_there(pytester: pytest.Pytester) -> None:
    result, report = run_suite(
        pytester, "--hami-adapter-class", f"{BROKEN}:MisspeltShimAdapter", "-k", "identity or alloc"
    )
    reasons = failures(report)
    assert "libhami_cudaa.so" in reasons["identity.adapter"]
    assert "'libhami_cuda.so'" in reasons["identity.adapter"]  # what is there, to compare with
    assert reasons["alloc.within-capacity"].endswith("is not built (see identity.adapter)")
    out = result.stdout.str()
    # the report opens with the verdict, before the failures' details
    assert out.index("hami-devices conformance") < out.index("FAILURES")


def test_an_unexpected_exception_is_shown_in_the_adapters_frames_after_the_verdict(pytester: pytest.Pytester) -> None:
    result, report = run_suite(
        pytester, "--hami-adapter-class", f"{BROKEN}:ExplodingReadAdapter", "-k", "monitor.schema"
    )
    assert failures(report)["monitor.schema"] == "RuntimeError: the vendor library's handle went stale"
    out = result.stdout.str()
    assert out.index("NOT certified") < out.index("FAILURES") < out.index("in read")
    details = out[out.index("FAILURES") :]
    assert "-> RuntimeError: the vendor library's handle went stale" in details
    assert "_callers.py" not in details and "_pytest" not in details  # pluggy's and pytest's frames


def test_a_plugin_with_a_partition_reader_is_certified_on_an_inventory(tmp_path: Path) -> None:
    """The reader reads the plugin's library, which knows no inventory device: the suite does not ask."""
    inventory = tmp_path / "plain.yaml"
    inventory.write_text(
        "nodes:\n  - name: plain-node\n    devices:\n      - {vendor: plainsim, model: Plain-16G, count: 3}\n"
    )
    args = ["--adapter-class", f"{BROKEN}:LibraryPartitionsAdapter", "--inventory", str(inventory)]
    proc, report = certify([*args, "-k", "release or restart or partition"], clean_environment(), tmp_path)
    assert report["adapter"]["backend"] == f"inventory:{inventory}", proc.stderr[-2000:]
    verdicts = {k: v for k, v in results(report).items() if k.startswith(("release.", "restart.", "partition."))}
    assert set(verdicts.values()) == {"pass"}, failures(report) or proc.stdout[-3000:]


def test_a_partition_reader_is_asked_about_the_devices_its_library_knows(pytester: pytest.Pytester) -> None:
    result, report = run_suite(
        pytester, "--hami-adapter-class", f"{BROKEN}:LibraryPartitionsAdapter", "-k", "release.any-order"
    )
    assert results(report)["release.any-order"] == "pass", result.stdout.str()[-2000:]


def test_readings_per_device_are_compared_with_the_fake_librarys_fixture(tmp_path: Path) -> None:
    """On the fake NVML two identical H100s hold different loads (the fixture's used memory, utilization,
    temperature, power): an adapter reading both through the first one's handle is refused."""
    env = fake_hardware_environment("nvidia", tmp_path)
    args = ["--adapter-class", f"{BROKEN}:FirstOfModelNvidiaAdapter", "-k", "monitor.per-device"]
    proc, report = certify(args, env, tmp_path)
    assert report["adapter"]["backend"] == "hardware", proc.stderr[-2000:]
    reason = failures(report).get("monitor.per-device", "")
    assert "the library's state says" in reason and "GPU-c0f0c0f0-1b4d-4e8a-9c6f-000000000001" in reason, reason


@pytest.mark.parametrize(("vendor", "adapter"), [("ascend", "VnpuLeakingAdapter"), ("cambricon", "SmluLeakingAdapter")])
def test_partitions_on_the_fake_libraries_are_read_from_their_state_files(
    vendor: str, adapter: str, tmp_path: Path
) -> None:
    """The release checks' ground truth on the fake DCMI and CNDev is their state file, not the adapter's
    binding: an adapter that never destroys its vNPUs or sMLU instances is refused."""
    env = fake_hardware_environment(vendor, tmp_path)
    args = ["--adapter-class", f"{BROKEN}:{adapter}", "-k", "release.any-order"]
    proc, report = certify(args, env, tmp_path)
    assert report["adapter"]["backend"] == "hardware", proc.stderr[-2000:]
    reason = failures(report).get("release.any-order", "")
    assert "the vendor library still reports partitions" in reason, reason
