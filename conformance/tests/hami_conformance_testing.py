"""Helpers of the conformance suite's own tests (a unique module name: every tests folder has a conftest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BROKEN = HERE / "hami_broken_adapters.py"
EXAMPLE = REPO / "examples" / "vendor-plugin"


def run_suite(pytester: pytest.Pytester, *options: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run the suite in-process with ``options``; return pytest's result and the JSON report."""
    report = pytester.path / "conformance.json"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--hami-examples", "5", "--hami-report", str(report), *options
    )
    data = json.loads(report.read_text()) if report.is_file() else {}
    return result, data


def results(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["result"] for c in report["checks"]}
