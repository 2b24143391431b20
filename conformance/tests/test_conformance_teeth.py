"""The suite has teeth: each deliberately broken adapter fails the check that names its bug."""

from __future__ import annotations

import pytest
from hami_broken_adapters import BROKEN as BROKEN_ADAPTERS
from hami_conformance_testing import BROKEN, results, run_suite


def test_the_control_adapter_is_certified(pytester: pytest.Pytester) -> None:
    result, report = run_suite(pytester, "--hami-adapter-class", f"{BROKEN}:PlainAdapter")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert report["certified"] is True
    verdicts = results(report)
    assert {v for k, v in verdicts.items() if k.startswith(("alloc.", "partition.", "stateful."))} == {"pass"}
    assert report["counts"]["MUST"]["fail"] == 0


@pytest.mark.parametrize("adapter", sorted(BROKEN_ADAPTERS))
def test_a_broken_adapter_fails_the_check_that_names_its_bug(pytester: pytest.Pytester, adapter: str) -> None:
    check, bug = BROKEN_ADAPTERS[adapter]
    result, report = run_suite(pytester, "--hami-adapter-class", f"{BROKEN}:{adapter}")
    verdicts = results(report)
    assert verdicts[check] == "fail", f"{adapter} {bug}, yet {check} did not fail: {verdicts}"
    assert result.ret != 0
    assert report["certified"] is False and check in report["must_failed"]
    reason = next(c["reason"] for c in report["checks"] if c["id"] == check)
    assert reason, "a failed check must say why"
    # the JUnit-visible failure names the check
    result.stdout.fnmatch_lines([f"*FAIL {check} [[]MUST[]]*"])
