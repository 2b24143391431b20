"""The suite has teeth: each deliberately broken adapter fails the check that names its bug.

The adapters in ``NEW_TEETH`` (issue 17) were each certified by the suite as it was before:
run against that version's hami_conformance (``git archive`` of the earlier commit on PYTHONPATH,
``pytest --hami-adapter-class conformance/tests/hami_broken_adapters.py:NAME``), every one passed
all its MUST checks.  ``MigLeakingAdapter`` passed too, on the simulated back end CI ran then.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hami_broken_adapters import BROKEN as BROKEN_ADAPTERS
from hami_broken_adapters import HARDWARE_BROKEN, NEW_TEETH
from hami_conformance_testing import (
    BROKEN,
    EXAMPLE,
    HERE,
    certify,
    clean_environment,
    failures,
    fake_hardware_environment,
    results,
    run_suite,
)

PLUGIN_SHIM = HERE / "hami_broken_plugin_shim.py"


def test_the_control_adapter_is_certified(pytester: pytest.Pytester) -> None:
    result, report = run_suite(pytester, "--hami-adapter-class", f"{BROKEN}:PlainAdapter")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert report["certified"] is True and report["full_level"] is True
    verdicts = results(report)
    groups = ("alloc.", "partition.", "stateful.", "restart.", "release.", "env.visible")
    assert {v for k, v in verdicts.items() if k.startswith(groups)} == {"pass"}
    assert report["counts"]["MUST"]["fail"] == 0


def test_the_new_teeth_are_the_issue_17_classes() -> None:
    checks = {BROKEN_ADAPTERS[name][0] for name in NEW_TEETH}
    assert {"env.visible-devices", "restart.same-devices", "restart.ledger-honoured", "release.any-order"} <= checks
    assert {"partition.granted-from-catalog", "partition.catalog", "limiter.compute-share"} <= checks


@pytest.mark.parametrize("adapter", sorted(BROKEN_ADAPTERS))
def test_a_broken_adapter_fails_the_check_that_names_its_bug(pytester: pytest.Pytester, adapter: str) -> None:
    check, bug = BROKEN_ADAPTERS[adapter]
    result, report = run_suite(pytester, "--hami-adapter-class", f"{BROKEN}:{adapter}")
    verdicts = results(report)
    assert verdicts[check] == "fail", f"{adapter} {bug}, yet {check} did not fail: {verdicts}"
    assert result.ret != 0
    assert report["certified"] is False and check in report["must_failed"] and report["level"] == "none"
    reason = next(c["reason"] for c in report["checks"] if c["id"] == check)
    assert reason, "a failed check must say why"
    # the JUnit-visible failure names the check
    result.stdout.fnmatch_lines([f"*FAIL {check} [[]MUST[]]*"])


@pytest.mark.parametrize("adapter", sorted(HARDWARE_BROKEN))
def test_a_bug_only_the_hardware_back_end_shows_is_caught_on_the_fake_library(adapter: str, tmp_path: Path) -> None:
    check, bug = HARDWARE_BROKEN[adapter]
    simulated = tmp_path / "simulated"
    simulated.mkdir()
    args = ["--adapter-class", f"{BROKEN}:{adapter}", "--examples", "5"]
    proc, report = certify(args, clean_environment(), simulated)
    assert proc.returncode == 0 and report["certified"], f"{adapter} passes on simulated devices: {failures(report)}"
    hardware = tmp_path / "hardware"
    hardware.mkdir()
    env = fake_hardware_environment("nvidia", hardware)
    proc, report = certify(args, env, hardware)
    assert report["adapter"]["backend"] == "hardware"
    assert results(report)[check] == "fail", f"{adapter} {bug}, yet {check} did not fail on the fake library"
    assert proc.returncode == 1 and not report["certified"]


def test_a_plugin_shim_that_does_not_limit_fails_memory_enforced(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin's own shim is resolved inside its package and preloaded; the harness proves it works
    (the example's real shim passes, see test_conformance_suite) or, as here, that it does not."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("PYTHONPATH", str(EXAMPLE))  # the workload processes import it too (not installed)
    result, report = run_suite(pytester, "--hami-adapter-class", f"{PLUGIN_SHIM}:PassThroughShimAdapter")
    verdicts = results(report)
    assert verdicts["env.limiter-memory"] == "pass", report["checks"]
    assert verdicts["limiter.memory-enforced"] == "fail" and result.ret != 0
    reason = next(c["reason"] for c in report["checks"] if c["id"] == "limiter.memory-enforced")
    assert "expected the runtime's out-of-memory error" in reason
