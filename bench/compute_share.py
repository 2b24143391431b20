"""Compute shares on the calibrated fake driver; prints one JSON object.

    python bench/compute_share.py [--quick] [--update-doc docs/compute-shares.md]

``--update-doc`` writes this run's figures into the calibrated-fake column of the document's table (the cells
marked ``<!-- fake: KEY -->``), so the figures there always come from a run.

Every tenant is a real process (tests/limiter/progs/compute_load.c) on the fake libcuda, with the shipped
CUDA shim preloaded and the fake libnvidia-ml on its library path, as a workload runs on an NVIDIA host.
The fake keeps time the way the H200 did (native/include/hami_fake_timeline.h), so these are the cases of
issue 36 and of scripts/compute_share_check.py, measured on the model:

alone           one process, cap at L in {30, 50}, kinds tiny (2 us kernels, launch-bound), medium (57 us),
                big (2.68 ms), decode (20 kernels of 4-120 us per token, then a synchronize): throughput as a
                share of bare, B (the share of device time the kind uses bare) and the device time used
two_cap_50      two big-kernel tenants at 50 % cap: each as a share of its solo throughput, and the sum
two_share_50    the same in share mode
cap_30_vs_free  a 30 % cap tenant beside one with no limit
share_arrival   a 30 % share tenant alone (share of bare), then a busy 70 % share tenant arrives: the time
                until both are within 5 points of their shares (300 ms windows); and the same at 50 / 50
launch_path     ns per tiny launch with the shim and no limit against without the shim

Throughput is read from the fake device, not from the tenants: the device time each process's kernels
ran over one window (every kind's work per unit is fixed, so device time is throughput).  Ratios are taken
within one run: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.limiter.tenants import Tenant, Tenants  # noqa: E402

KINDS = ("tiny", "medium", "big", "decode")
LIMITS = (30, 50)


def target(value: float | None, bound: float, op: str) -> dict[str, object]:
    met = value is not None and (value >= bound if op == ">=" else value <= bound)
    return {"value": None if value is None else round(value, 3), "bound": bound, "op": op, "met": met}


KERNEL_US = {"tiny": 2.0, "medium": 57.0, "big": 2680.0}
DECODE_TOKEN_US = 688.0  # tests/limiter/progs/compute_load.c: the 20 kernels of one token


def doc_cells(out: dict[str, Any]) -> dict[str, str]:
    """The calibrated-fake column of docs/compute-shares.md, by placeholder key."""
    cells: dict[str, str] = {}
    bare, alone, targets = out["bare_device_pct"], out["alone"], out["targets"]
    for kind in KINDS:
        per_unit = KERNEL_US.get(kind, DECODE_TOKEN_US)
        cells[f"{kind}_bare"] = f"{bare[kind] / 100 / per_unit * 1e6:,.0f}/s; B {bare[kind]:.1f} %"
        for limit in LIMITS:
            got = alone[f"{kind}_cap{limit}"]
            bound = targets[f"{kind}_cap{limit}_throughput"]["bound"]
            cells[f"{kind}_cap{limit}"] = f"{got['pct_of_bare']:.1f} % (>= {bound:.1f}); {got['device_pct']:.1f} %"
    for key, name in (("two_cap50", "two_cap_50"), ("two_share50", "two_share_50")):
        a, b = out[name]["first_pct_of_solo"], out[name]["second_pct_of_solo"]
        cells[key] = f"{a:.1f}, {b:.1f}, {a + b:.1f}"
    free = out["cap_30_vs_free"]
    cells["cap30_unlimited"] = f"{free['capped_pct_of_solo']:.1f}, {free['free_pct_of_solo']:.1f}"
    arrival = out["share_arrival_30_70"]
    cells["share30_alone"] = f"{targets['share_alone_30']['value']:.1f}"
    settle = arrival["settle_s"]
    cells["share_arrival_converge"] = (
        f"{'not within 5 s' if settle is None else f'{settle:.2f} s'}; then {arrival['first_pct']:.1f} % and "
        f"{arrival['second_pct']:.1f} %"
    )
    launch = out["launch_path"]
    cells["launch_no_limit"] = (
        f"{launch['shim_ns'] / 1000:.2f}, {launch['bare_ns'] / 1000:.2f}, "
        f"{(launch['shim_ns'] - launch['bare_ns']) / 1000:+.2f} us"
    )
    cells["hami_core_force30"] = "n/a (HAMi-core does not run on the fake)"
    return cells


def update_doc(path: Path, cells: dict[str, str]) -> None:
    text = path.read_text()
    for key, value in cells.items():
        text = re.sub(rf"<!-- fake: {key} -->[^|\n]*", f"<!-- fake: {key} --> {value} ", text)
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows")
    parser.add_argument("--update-doc", type=Path, help="write the figures into this document's fake column")
    args = parser.parse_args()
    warmup, window = (1.0, 1.5) if args.quick else (1.5, 3.0)
    out: dict[str, Any] = {"warmup_s": warmup, "window_s": window}
    targets: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="hami-compute-share-") as tmp:
        os.chmod(tmp, 0o700)
        bench = Tenants(Path(tmp), warmup, window)
        bare = {kind: bench.measure([Tenant(kind, shim=False)])[0][0] for kind in KINDS}
        # Launch-bound work is bound by the host: on a shared machine its bare speed drifts, so it is
        # measured again beside each capped run and the two are compared within the pair.
        bare_beside: dict[int, float] = {}
        out["bare_device_pct"] = {k: round(v, 2) for k, v in bare.items()}
        alone: dict[str, dict[str, float]] = {}
        for kind in KINDS:
            for limit in LIMITS:
                (used,), _ = bench.measure([Tenant(kind, limit)])
                reference = bare[kind]
                if kind == "tiny":
                    reference = bare_beside[limit] = bench.measure([Tenant(kind, shim=False)])[0][0]
                of_bare = used / reference
                alone[f"{kind}_cap{limit}"] = {"pct_of_bare": round(100 * of_bare, 2), "device_pct": round(used, 2)}
                floor = 100 * min(1.0, limit / reference) - 5
                targets[f"{kind}_cap{limit}_throughput"] = target(100 * of_bare, round(floor, 2), ">=")
                targets[f"{kind}_cap{limit}_device_time"] = target(used, limit + 5, "<=")
        out["alone"] = alone
        out["tiny_bare_beside_pct"] = {str(k): round(v, 2) for k, v in bare_beside.items()}
        solo = bare["big"]
        for name, tenants in [
            ("two_cap_50", [Tenant("big", 50), Tenant("big", 50)]),
            ("two_share_50", [Tenant("big", 50, "share"), Tenant("big", 50, "share")]),
        ]:
            (a, b), device = bench.measure(tenants)
            ra, rb = 100 * a / solo, 100 * b / solo
            out[name] = {
                "first_pct_of_solo": round(ra, 2),
                "second_pct_of_solo": round(rb, 2),
                "device_pct": round(device, 2),
            }
            targets[f"{name}_first_low"] = target(ra, 45, ">=")
            targets[f"{name}_first_high"] = target(ra, 55, "<=")
            targets[f"{name}_second_low"] = target(rb, 45, ">=")
            targets[f"{name}_second_high"] = target(rb, 55, "<=")
            targets[f"{name}_together"] = target(ra + rb, 90, ">=")
        (capped, free), _ = bench.measure([Tenant("big", 30), Tenant("big", shim=False)])
        rc, rf = 100 * capped / solo, 100 * free / solo
        out["cap_30_vs_free"] = {"capped_pct_of_solo": round(rc, 2), "free_pct_of_solo": round(rf, 2)}
        targets["cap_30_vs_free_capped_low"] = target(rc, 25, ">=")
        targets["cap_30_vs_free_capped_high"] = target(rc, 35, "<=")
        targets["cap_30_vs_free_free"] = target(rf, 60, ">=")
        arrival = bench.share_arrival(30, 70)
        out["share_arrival_30_70"] = arrival
        alone_share = arrival["alone_pct"]
        targets["share_alone_30"] = target(None if alone_share is None else 100 * alone_share / solo, 90, ">=")
        targets["share_arrival_settle_s"] = target(arrival["settle_s"], 1.0, "<=")
        # The same with two equal shares: what time-slicing itself leaves each of two busy contexts (45.3 %
        # on the model, as on the H200) is within 5 points of 50.
        out["share_arrival_50_50"] = bench.share_arrival(50, 50)
        seconds = 1.0 if args.quick else 2.0
        bare_ns = [bench.launch_ns(False, seconds) for _ in range(3)]
        shim_ns = [bench.launch_ns(True, seconds) for _ in range(3)]
        extra = sorted(shim_ns)[1] - sorted(bare_ns)[1]
        out["launch_path"] = {"bare_ns": round(sorted(bare_ns)[1], 1), "shim_ns": round(sorted(shim_ns)[1], 1)}
        targets["launch_path_extra_ns"] = target(extra, 1000, "<=")
    out["load_average"] = os.getloadavg()
    out["targets"] = targets
    out["all_met"] = all(t["met"] for t in targets.values())
    if args.update_doc:
        update_doc(args.update_doc, doc_cells(out))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
