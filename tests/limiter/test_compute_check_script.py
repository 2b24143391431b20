"""``scripts/compute_share_check.py`` (issue 36 item 5), which can only measure on a real NVIDIA GPU: its
``--selftest`` runs the same plan, environments, JSON and arithmetic on CPU stand-ins, and these tests check that
plan and arithmetic.  Expected figures are recomputed here from the issue's definitions and the workers' raw
numbers, and the small arithmetic helpers are checked against hand-worked examples.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hami_devices.limiter import shim_library

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
SCRIPT = SCRIPTS / "compute_share_check.py"
sys.path.append(str(SCRIPTS))  # last, so that nothing else is shadowed by a script
from compute_share import figures, targets  # noqa: E402  (scripts/ is not a package)

KINDS = ("tiny", "medium", "big", "decode")
# Issue 36 item 4, one name per judged figure: (op, bound) where the bound does not depend on a measurement.
FIXED = {
    "two_cap50_a_pct": ("in", [45, 55]), "two_cap50_b_pct": ("in", [45, 55]),
    "two_cap50_together_pct": (">=", 90),
    "two_share50_a_pct": ("in", [45, 55]), "two_share50_b_pct": ("in", [45, 55]),
    "two_share50_together_pct": (">=", 90),
    "cap30_unlimited_capped_pct": ("in", [25, 35]), "cap30_unlimited_other_pct": (">=", 60),
    "share30_alone_pct": (">=", 90), "share_arrival_converge_s": ("<=", 1.0),
    "launch_no_limit_overhead_us": ("<=", 1.0),
}
SWEPT = {f"alone_{k}_cap{limit}_{what}" for k in KINDS for limit in (30, 50)
         for what in ("throughput_pct", "device_pct")}


def _selftest(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = dict(os.environ)
    # A limit left in the caller's environment must reach no case that does not ask for it.
    env.update(HAMI_DEVICE_CORE_LIMIT="77", CUDA_DEVICE_SM_LIMIT="77", GPU_CORE_UTILIZATION_POLICY="force")
    done = subprocess.run([sys.executable, str(SCRIPT), "--selftest", *args], capture_output=True, text=True,
                          env=env, timeout=240, check=False)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, f"stdout must be one JSON line, got {done.stdout[-500:]!r}; stderr {done.stderr[-2000:]}"
    return done, json.loads(lines[0])


@pytest.fixture(scope="module")
def selftest() -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    return _selftest()


def _judged(target: dict[str, Any]) -> bool:
    value, bound, op = target["value"], target["bound"], target["op"]
    if value is None or bound is None:
        return False
    if op == "in":
        return bool(bound[0] <= value <= bound[1])
    return bool(value >= bound) if op == ">=" else bool(value <= bound)


def test_one_json_line_with_versions_targets_and_progress_on_stderr(selftest: Any) -> None:
    done, out = selftest
    assert done.returncode == (0 if out["ok"] else 1)
    assert set(out["versions"]) == {"driver", "cuda_driver", "torch", "cuda_runtime"}
    assert out["mode"].startswith("selftest") and out["gpu"]
    assert set(out["targets"]) == SWEPT | set(FIXED)
    for name, target in out["targets"].items():
        assert set(target) == {"value", "bound", "op", "met"}, name
        assert target["met"] is _judged(target), name
    for name, (op, bound) in FIXED.items():
        assert (out["targets"][name]["op"], out["targets"][name]["bound"]) == (op, bound), name
    assert out["targets_met"] == sum(t["met"] for t in out["targets"].values())
    assert out["problems"] == {}, out["problems"]
    assert "[compute-share] == bare" in done.stderr and "[compute-share] == share_arrival" in done.stderr


def test_every_case_ran_under_its_allocations_environment(selftest: Any) -> None:
    _, out = selftest
    cases, shim = out["cases"], str(shim_library("libhami_cuda.so"))
    assert cases["bare"]["env"] == {} and cases["bare"]["shim_loaded"] is False
    hami = {
        "no_limit": None, "cap30": ("30", "cap"), "cap50": ("50", "cap"),
        "two_cap50/a": ("50", "cap"), "two_cap50/b": ("50", "cap"),
        "two_share50/a": ("50", "share"), "two_share50/b": ("50", "share"),
        "cap30_unlimited/capped": ("30", "cap"), "cap30_unlimited/unlimited": None,
        "share_arrival/first": ("30", "share"), "share_arrival/second": ("70", "share"),
    }
    regions = set()
    for name, limit in hami.items():
        env = cases[name]["env"]
        assert cases[name]["shim_loaded"] is True, name
        assert env["LD_PRELOAD"] == shim, name
        regions.add(env.pop("HAMI_REGION_PATH"))
        expected = {} if limit is None else {"HAMI_DEVICE_CORE_LIMIT": limit[0], "HAMI_DEVICE_CORE_POLICY": limit[1]}
        assert {k: v for k, v in env.items() if k != "LD_PRELOAD"} == expected, name
    assert len(regions) == len(hami)  # every allocation its own region file
    force = cases["hami_core_force30"]
    assert force["shim_loaded"] is True
    assert set(force["env"]) == {"LD_PRELOAD", "CUDA_DEVICE_MEMORY_SHARED_CACHE", "CUDA_DEVICE_SM_LIMIT",
                                 "GPU_CORE_UTILIZATION_POLICY"}
    assert (force["env"]["CUDA_DEVICE_SM_LIMIT"], force["env"]["GPU_CORE_UTILIZATION_POLICY"]) == ("30", "force")


def _raw(cases: dict[str, Any], case: str, kind: str) -> dict[str, Any]:
    return cases[case]["decode"] if kind == "decode" else cases[case]["kernels"][kind]


def test_sweep_targets_follow_the_issues_formula_from_the_raw_measurements(selftest: Any) -> None:
    _, out = selftest
    cases, got = out["cases"], out["targets"]
    for kind in KINDS:
        bare = _raw(cases, "bare", kind)
        busy = bare["device_s"] * bare["per_s"]  # B: the share of device time the stream uses at bare
        assert out["figures"]["sweep"][kind]["busy_pct"] == pytest.approx(100 * busy, abs=1e-3)
        for limit in (30, 50):
            limited = _raw(cases, f"cap{limit}", kind)["per_s"]
            throughput = got[f"alone_{kind}_cap{limit}_throughput_pct"]
            assert throughput["op"] == ">="
            assert throughput["value"] == pytest.approx(100 * limited / bare["per_s"], abs=0.011)
            assert throughput["bound"] == pytest.approx(100 * min(1.0, limit / 100 / busy) - 5, abs=0.011)
            device = got[f"alone_{kind}_cap{limit}_device_pct"]
            assert (device["op"], device["bound"]) == ("<=", limit + 5)
            assert device["value"] == pytest.approx(100 * bare["device_s"] * limited, abs=0.011)


def test_tenant_launch_and_arrival_figures(selftest: Any) -> None:
    _, out = selftest
    fig, got, cases = out["figures"], out["targets"], out["cases"]
    solo = cases["bare"]["kernels"]["big"]["per_s"]
    for group, names in (("two_cap50", ("a", "b")), ("two_share50", ("a", "b")),
                         ("cap30_unlimited", ("capped", "unlimited"))):
        cell = fig["tenants"][group]
        for name in names:
            assert cell[name]["share_pct"] == pytest.approx(100 * cell[name]["per_s"] / solo, abs=1e-3)
            assert cases[f"{group}/{name}"]["completed"] > 0
        assert cell["together_pct"] == pytest.approx(sum(cell[n]["share_pct"] for n in names), abs=1e-3)
    assert got["two_cap50_together_pct"]["value"] == pytest.approx(fig["tenants"]["two_cap50"]["together_pct"],
                                                                   abs=0.006)
    overhead = 1e6 * (cases["no_limit"]["launch_s"] - cases["bare"]["launch_s"])
    assert got["launch_no_limit_overhead_us"]["value"] == pytest.approx(overhead, abs=0.011)
    arrival = fig["share_arrival"]
    assert arrival["shares"] == [30.0, 70.0] and arrival["samples"]
    assert [row[0] for row in arrival["samples"]] == pytest.approx([0.1 * (i + 1) for i in
                                                                   range(len(arrival["samples"]))])
    assert all(len(row) == 3 for row in arrival["samples"])


def test_cases_past_the_budget_are_skipped_and_their_targets_unmet() -> None:
    done, out = _selftest("--budget-s", "0.5")
    assert done.returncode == 1 and out["ok"] is False
    assert set(out["problems"]) == set(out["cases"]) and all("skipped" in p for p in out["problems"].values())
    assert all(t["value"] is None and t["met"] is False for t in out["targets"].values())


# The arithmetic, on hand-worked logs.

def test_rate_counts_completions_inside_the_window() -> None:
    log = [(10.0, 0), (10.5, 5), (11.0, 10), (11.5, 15)]
    assert figures.rate(log, 10.0, 11.0) == pytest.approx(10.0)
    assert figures.rate(log, 10.2, 11.2) == pytest.approx(10.0)  # 0 done by 10.2, 10 by 11.2
    assert figures.rate(log, 9.0, 10.5) == pytest.approx(5 / 1.5)  # nothing had run before the log started
    assert figures.rate(log, 11.0, 12.0) is None  # past the last completion: unknown
    assert figures.whole_rate(log) == pytest.approx(10.0)


def _ticks(start: float, count: int, per_s: float, first: int = 0) -> list[tuple[float, int]]:
    """Completions at the middle of each 1/per_s slot from ``start``."""
    return [(start + (k - 0.5) / per_s, first + k) for k in range(1, count + 1)]


def test_shares_after_an_arrival_and_when_they_settle() -> None:
    # Solo speed 100/s.  The first tenant runs alone at 100/s for 3 s, then at 30/s; the second arrives at 3 s,
    # runs at 100/s for 0.5 s and then at 70/s.  Trailing 0.3 s windows (clipped at the arrival): the second is at
    # 100 % until 3.5, 90 % at 3.6, 80 % at 3.7 and 70 % from 3.8 on, so both are within 5 points from 0.8 s.
    first = [(0.0, 0), *_ticks(0.0, 300, 100.0)]
    first += _ticks(3.0, 45, 30.0, first=300)
    second = [(3.0, 0), *_ticks(3.0, 50, 100.0)]
    second += _ticks(3.5, 70, 70.0, first=50)
    assert figures.rate(first, 1.0, 3.0) == pytest.approx(100.0)
    rows = figures.sampled_shares([first, second], 100.0, 3.0, 4.4)
    assert [r[0] for r in rows] == pytest.approx([0.1 * k for k in range(1, 15)])
    assert all(r[1] == pytest.approx(30.0) for r in rows)
    assert [r[2] for r in rows[:8]] == pytest.approx([100, 100, 100, 100, 100, 90, 80, 70])
    assert figures.converge_time(rows, (30.0, 70.0), 5.0) == pytest.approx(0.8)


def test_settling_is_the_first_sample_after_which_every_sample_holds() -> None:
    rows = [[0.1, 50.0], [0.2, 31.0], [0.3, 40.0], [0.4, 29.0], [0.5, 30.0]]
    assert figures.converge_time(rows, (30.0,), 5.0) == 0.4
    assert figures.converge_time([*rows, [0.6, 36.0]], (30.0,), 5.0) is None
    assert figures.converge_time([[0.1, None]], (30.0,), 5.0) is None


def test_cap_floor_is_min_of_one_and_limit_over_busy_less_five_points() -> None:
    assert targets.cap_throughput_floor(30, 0.25) == pytest.approx(95.0)  # uses 25 % of the device: not slowed
    assert targets.cap_throughput_floor(30, 1.0) == pytest.approx(25.0)
    assert targets.cap_throughput_floor(50, 0.8) == pytest.approx(57.5)  # 100 * 50/80 - 5
    assert targets.cap_throughput_floor(50, None) is None
    assert targets.at_least(None, 10)["met"] is False and targets.within(None, 1, 2)["met"] is False
    assert targets.at_most(35.004, 35)["met"] is True  # judged on the rounded value the JSON shows
