"""Figures and targets from the workers' results: every number the check reports, and issue 36's targets.

Shares are percentages of a bare speed: the same stream alone on the GPU, with no shim at all.  A kernel's
device time is measured in the bare run (where nothing paces the launches); the device time a limited run used
is that times its kernels per second, since a limiter paces launches and does not change what a kernel does.
"""

from __future__ import annotations

from typing import Any

from .figures import WINDOW_S, busy_fraction, converge_time, pct, rate, sampled_shares
from .plan import Timing
from .targets import Target, at_least, at_most, cap_throughput_floor, within

Result = dict[str, Any]
SWEEP = ("tiny", "medium", "big", "decode")
CAPS = (30, 50)
ARRIVAL_SHARES = (30.0, 70.0)  # share_arrival: the first tenant's share and the second's
TOLERANCE = 5.0  # points


def _get(result: Result | None, *path: str) -> Any:
    value: Any = result
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _speed(result: Result | None, kind: str) -> tuple[float | None, float | None]:
    """Kernels (or tokens) per second and device seconds of one, from a solo run."""
    entry = _get(result, "decode") if kind == "decode" else _get(result, "kernels", kind)
    return _get(entry, "per_s"), _get(entry, "device_s")


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def _scaled(x: float | None, factor: float) -> float | None:
    return None if x is None else x * factor


def sweep(solo: dict[str, Result]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in SWEEP:
        bare_per_s, device_s = _speed(solo.get("bare"), kind)
        busy = busy_fraction(device_s, bare_per_s)
        row: dict[str, Any] = {"bare_per_s": _r(bare_per_s), "device_us": _r(_scaled(device_s, 1e6)),
                               "busy_pct": _r(_scaled(busy, 100.0))}
        for limit in CAPS:
            per_s, _ = _speed(solo.get(f"cap{limit}"), kind)
            row[f"cap{limit}"] = {"per_s": _r(per_s), "share_pct": _r(pct(per_s, bare_per_s)),
                                  "device_pct": _r(_scaled(busy_fraction(device_s, per_s), 100.0))}
        out[kind] = row
    return out


def launch(solo: dict[str, Result]) -> dict[str, Any]:
    bare_us = _scaled(_get(solo.get("bare"), "launch_s"), 1e6)
    shim_us = _scaled(_get(solo.get("no_limit"), "launch_s"), 1e6)
    shares = {kind: _r(pct(_speed(solo.get("no_limit"), kind)[0], _speed(solo.get("bare"), kind)[0]))
              for kind in SWEEP[:3]}
    device_us = {kind: _r(_scaled(_speed(solo.get("no_limit"), kind)[1], 1e6)) for kind in SWEEP[:3]}
    overhead = None if bare_us is None or shim_us is None else shim_us - bare_us
    return {"bare_us": _r(bare_us), "shim_us": _r(shim_us), "overhead_us": _r(overhead),
            "no_limit_share_pct": shares, "no_limit_device_us": device_us}


def together(tenants: dict[str, Result], solo_per_s: float | None, timing: Timing) -> dict[str, Any]:
    out: dict[str, Any] = {}
    total: float | None = 0.0
    for name, result in tenants.items():
        t0, log = _get(result, "t0"), _get(result, "log")
        per_s = None if t0 is None or not log else rate(log, t0 + timing.together_window[0],
                                                          t0 + timing.together_window[1])
        share = pct(per_s, solo_per_s)
        out[name] = {"per_s": _r(per_s), "share_pct": _r(share)}
        total = None if total is None or share is None else total + share
    out["together_pct"] = _r(total)
    return out


def arrival(tenants: dict[str, Result], solo_per_s: float | None, timing: Timing) -> dict[str, Any]:
    first, second = tenants.get("first"), tenants.get("second")
    t0, logs = _get(first, "t0"), [_get(first, "log"), _get(second, "log")]
    out: dict[str, Any] = {"shares": list(ARRIVAL_SHARES), "window_s": WINDOW_S}
    if t0 is None or solo_per_s is None or not all(logs):
        return {**out, "alone_pct": None, "converge_s": None, "samples": []}
    alone = rate(logs[0], t0 + timing.alone_window[0], t0 + timing.alone_window[1])
    rows = sampled_shares(logs, solo_per_s, t0 + timing.arrival_s, t0 + timing.arrival_end_s - 0.1)
    rows = [[_r(v, 2) for v in row] for row in rows]
    return {**out, "alone_pct": _r(pct(alone, solo_per_s)),
            "converge_s": converge_time(rows, ARRIVAL_SHARES, TOLERANCE), "samples": rows}


def figures(solo: dict[str, Result], grouped: dict[str, dict[str, Result]], timing: Timing) -> dict[str, Any]:
    solo_per_s, solo_device_s = _speed(solo.get("bare"), "big")
    force_per_s, _ = _speed(solo.get("hami_core_force30"), "big")
    return {
        "sweep": sweep(solo),
        "launch": launch(solo),
        "solo_big_per_s": _r(solo_per_s),
        "tenants": {name: together(grouped.get(name, {}), solo_per_s, timing)
                    for name in ("two_cap50", "two_share50", "cap30_unlimited")},
        "share_arrival": arrival(grouped.get("share_arrival", {}), solo_per_s, timing),
        "hami_core_force30": {"per_s": _r(force_per_s), "share_pct": _r(pct(force_per_s, solo_per_s)),
                              "device_pct": _r(_scaled(busy_fraction(solo_device_s, force_per_s), 100.0))},
    }


def targets(fig: dict[str, Any]) -> dict[str, Target]:
    out: dict[str, Target] = {}
    for kind in SWEEP:
        row = fig["sweep"][kind]
        busy = None if row["busy_pct"] is None else row["busy_pct"] / 100.0
        for limit in CAPS:
            cell = row[f"cap{limit}"]
            out[f"alone_{kind}_cap{limit}_throughput_pct"] = at_least(cell["share_pct"],
                                                                      cap_throughput_floor(limit, busy))
            out[f"alone_{kind}_cap{limit}_device_pct"] = at_most(cell["device_pct"], limit + 5)
    for name in ("two_cap50", "two_share50"):
        cell = fig["tenants"][name]
        out[f"{name}_a_pct"] = within(cell["a"]["share_pct"], 45, 55)
        out[f"{name}_b_pct"] = within(cell["b"]["share_pct"], 45, 55)
        out[f"{name}_together_pct"] = at_least(cell["together_pct"], 90)
    cell = fig["tenants"]["cap30_unlimited"]
    out["cap30_unlimited_capped_pct"] = within(cell["capped"]["share_pct"], 25, 35)
    out["cap30_unlimited_other_pct"] = at_least(cell["unlimited"]["share_pct"], 60)
    out["share30_alone_pct"] = at_least(fig["share_arrival"]["alone_pct"], 90)
    out["share_arrival_converge_s"] = at_most(fig["share_arrival"]["converge_s"], 1.0)
    out["launch_no_limit_overhead_us"] = at_most(fig["launch"]["overhead_us"], 1.0)
    return out
