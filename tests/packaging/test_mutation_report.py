"""``scripts/mutation_report.py``, fed what ``mutmut results --all true`` prints: the score it reports, the
survivors it names, and its exit status against the required score."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mutation_report.py"


def _report(lines: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, check=False)


RESULTS = [f"    pkg.mod.x_f__mutmut_{i}: killed" for i in range(18)] + [
    "    pkg.mod.x_f__mutmut_18: timeout",
    "    pkg.mod.x_g__mutmut_1: survived",
]


def test_timeouts_count_as_killed_and_survivors_are_named() -> None:
    done = _report(RESULTS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["killed 19 of 20 (95.0 %)", "  survived: pkg.mod.x_g__mutmut_1"]


def test_a_score_below_the_requirement_fails() -> None:
    done = _report(RESULTS, "--require", "96")
    assert done.returncode == 1
    assert "below the 96 % required" in done.stderr


def test_no_tests_counts_against_the_score_in_json() -> None:
    done = _report([*RESULTS, "    pkg.mod.x_h__mutmut_1: no tests"], "--json")
    assert done.returncode == 1
    out = json.loads(done.stdout)
    assert (out["killed"], out["mutants"], out["passed"]) == (19, 21, False)
    assert out["survivors"] == {"pkg.mod.x_g__mutmut_1": "survived", "pkg.mod.x_h__mutmut_1": "no tests"}


def test_no_results_is_an_error() -> None:
    done = _report([])
    assert done.returncode == 1 and "no mutants" in done.stderr
