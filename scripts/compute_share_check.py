#!/usr/bin/env python3
"""Compute shares on a real NVIDIA GPU (issue 36): does a share of L % hold for every kernel size, alone and
with other tenants, in ``cap`` and ``share`` mode?  Never run by the tests against a GPU.

    python scripts/compute_share_check.py                 # PyTorch on GPU 0, the shipped libhami_cuda.so
    python scripts/compute_share_check.py --budget-s 150  # what scripts/cuda-limiter-check.sh does
    python scripts/compute_share_check.py --selftest      # the same plan on CPU stand-ins (no GPU, no torch)

Cases, each process under its own allocation's environment (LD_PRELOAD shim, a region file, the core limit):
  bare, no_limit        tiny (add_ on 16 floats), medium (1024 matmul), big (4096 matmul) alone, with no shim
                        and with the shim but no core limit: speed, each kernel's device time, the host time of a
                        launch; bare also decodes with a small fp16 decoder LM (random weights)
  cap30, cap50          the same kernels and the decoder alone under HAMI_DEVICE_CORE_LIMIT=L, policy cap
  two_cap50, two_share50, cap30_unlimited
                        two 4096-matmul tenants at once (50/50 cap, 50/50 share, 30 cap beside no limit)
  share_arrival         a 30 % share tenant alone, then a busy 70 % share tenant arrives; sampled every 100 ms
  hami_core_force30     CUDA_DEVICE_SM_LIMIT=30 with GPU_CORE_UTILIZATION_POLICY=force (HAMi-core's names)
Progress goes to stderr; stdout gets one JSON line: versions, every figure, and issue 36's targets
(name -> {value, bound, op, met}).  Exit status 0 when every target was met.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from compute_share import plan, report, worker
from compute_share.runner import Runner

SCRIPT = Path(__file__).resolve()


def driver_versions() -> dict[str, str | None]:
    """The driver and the CUDA version it supports, from nvidia-smi (None where there is none)."""
    found: dict[str, str | None] = {"driver": None, "cuda_driver": None, "gpu": None}
    if shutil.which("nvidia-smi") is None:
        return found
    try:
        query = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader", "-i", "0"],
                               capture_output=True, text=True, timeout=30, check=False).stdout.strip()
        header = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return found
    if "," in query:
        found["driver"], found["gpu"] = (v.strip() for v in query.splitlines()[0].split(",", 1))
    match = re.search(r"CUDA Version:\s*([0-9.]+)", header)
    found["cuda_driver"] = match.group(1) if match else None
    return found


def default_shim() -> Path:
    from hami_devices.limiter import shim_library

    return shim_library("libhami_cuda.so")


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    """A worker's result without its completion log (the figures carry what the log says)."""
    out = {k: v for k, v in result.items() if k not in ("log", "t0")}
    if "log" in result:
        out["completed"] = result["log"][-1][1]
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    timing = plan.Timing()
    if args.selftest:
        timing = timing.scaled(args.scale, startup_s=1.0)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="hami-compute-share-"))
    work.mkdir(parents=True, exist_ok=True)
    runner = Runner(python=args.python, script=SCRIPT, backend="stand-in" if args.selftest else "torch",
                    shim=Path(args.shim) if args.shim else default_shim(), work=work, timing=timing,
                    deadline=started + args.budget_s)
    solo = {case.name: runner.solo(case) for case in plan.solos()}
    grouped = {group.name: runner.group(group) for group in plan.groups(timing)}
    solo[plan.HAMI_CORE_FORCE.name] = runner.solo(plan.HAMI_CORE_FORCE)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)

    figures = report.figures(solo, grouped, timing)
    targets = report.targets(figures)
    cases = {name: _summary(r) for name, r in solo.items()}
    cases.update({f"{g}/{t}": _summary(r) for g, tenants in grouped.items() for t, r in tenants.items()})
    problems: dict[str, Any] = {name: c.get("error") or c.get("errors") or f"skipped: {c['skipped']}"
                                for name, c in cases.items() if {"error", "errors", "skipped"} & set(c)}
    device = solo["bare"].get("device") or {}
    driver = driver_versions()
    return {
        "ok": not problems and all(t["met"] for t in targets.values()),
        "mode": "selftest (CPU stand-ins)" if args.selftest else "gpu",
        "versions": {"driver": driver["driver"], "cuda_driver": driver["cuda_driver"], "torch": device.get("torch"),
                     "cuda_runtime": device.get("cuda_runtime")},
        "gpu": device.get("gpu") or driver["gpu"],
        "budget_s": args.budget_s,
        "elapsed_s": round(time.monotonic() - started, 1),
        "figures": figures,
        "targets": targets,
        "targets_met": sum(t["met"] for t in targets.values()),
        "problems": problems,
        "cases": cases,
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["worker"]:
        return worker.main(json.loads(argv[1]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--selftest", "--dry-run", action="store_true",
                        help="run the plan on CPU stand-ins: orchestration, environment, JSON and arithmetic only")
    parser.add_argument("--scale", type=float, default=0.1, help="--selftest: the durations' scale (default 0.1)")
    parser.add_argument("--budget-s", type=float, default=180.0, help="seconds for every case together")
    parser.add_argument("--shim", help="the CUDA shim (default: the installed libhami_cuda.so)")
    parser.add_argument("--work", help="a folder for the region and go files (kept; default a temporary one)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the worker processes")
    args = parser.parse_args(argv)
    result = run(args)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
