"""One process of the check: builds its device under the environment the orchestrator gave it, measures, and
prints its result as the last line of stdout (a tenant first prints READY, then waits for the go file)."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from .device import Device
from .workloads import BATCH, BURST, decode_log, device_seconds, launch_seconds, stream

LIMITER_VARIABLES = ("LD_PRELOAD", "HAMI_REGION_PATH", "HAMI_DEVICE_CORE_LIMIT", "HAMI_DEVICE_CORE_POLICY",
                     "CUDA_DEVICE_SM_LIMIT", "GPU_CORE_UTILIZATION_POLICY", "CUDA_DEVICE_MEMORY_SHARED_CACHE")


def _say(spec: dict[str, Any], text: str) -> None:
    print(f"[compute-share] {spec['name']}: {text}", file=sys.stderr, flush=True)


def _device(backend: str) -> Device:
    if backend == "torch":
        from .cuda import TorchDevice

        return TorchDevice()
    from .standin import StandInDevice

    return StandInDevice()


def _seen() -> dict[str, Any]:
    """The limiter's variables this process was started with, and whether the CUDA shim is mapped into it."""
    maps = Path("/proc/self/maps")
    loaded = maps.exists() and "libhami_cuda" in maps.read_text()
    return {"env": {k: os.environ[k] for k in LIMITER_VARIABLES if k in os.environ}, "shim_loaded": loaded}


def _part(spec: dict[str, Any], name: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One measurement of a solo run; a failure is recorded against it and the run goes on to the next."""
    try:
        return measure()
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        _say(spec, f"{name} failed: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def _kernel(spec: dict[str, Any], device: Device, kind: str) -> dict[str, Any]:
    launch = device.launcher(kind)
    stream(device, launch, BATCH[kind], time.monotonic() + spec["warmup_s"])
    busy = device_seconds(device, launch, BURST[kind]) if spec["kernel_time"] else None
    log = stream(device, launch, BATCH[kind], time.monotonic() + spec["seconds"])
    per_s = log[-1][1] / (log[-1][0] - log[0][0])
    _say(spec, f"{kind}: {per_s:.1f}/s" + (f", {busy * 1e6:.2f} us of device time each" if busy else ""))
    return {"per_s": per_s, "device_s": busy}


def _launch(spec: dict[str, Any], device: Device) -> dict[str, Any]:
    seconds = launch_seconds(device, device.launcher("tiny"))
    _say(spec, f"tiny launch {seconds * 1e6:.2f} us")
    return {"launch_s": seconds}


def _decode(spec: dict[str, Any], device: Device) -> dict[str, Any]:
    decoder = device.decoder()
    decoder.reset()
    decode_log(decoder.step, decoder.token, time.monotonic() + spec["warmup_s"])
    busy = device_seconds(device, decoder.step, 4) if spec["kernel_time"] else None
    decoder.reset()
    log = decode_log(decoder.step, decoder.token, time.monotonic() + spec["decode_s"])
    per_s = log[-1][1] / (log[-1][0] - log[0][0])
    _say(spec, f"decode: {per_s:.1f} tokens/s")
    return {"per_s": per_s, "device_s": busy}


def solo(spec: dict[str, Any], device: Device) -> dict[str, Any]:
    parts = {kind: _part(spec, kind, partial(_kernel, spec, device, kind)) for kind in spec["kinds"]}
    result: dict[str, Any] = {"kernels": dict(parts)}
    if spec["launch"]:
        parts["launch"] = _part(spec, "launch", partial(_launch, spec, device))
        result.update({k: v for k, v in parts["launch"].items() if k != "error"})
    if spec["decode_s"]:
        result["decode"] = parts["decode"] = _part(spec, "decode", partial(_decode, spec, device))
    failed = {name: part["error"] for name, part in parts.items() if "error" in part}
    if failed:
        result["errors"] = failed
    return result


def tenant(spec: dict[str, Any], device: Device) -> dict[str, Any]:
    launch = device.launcher(spec["kind"])
    stream(device, launch, BATCH[spec["kind"]], time.monotonic() + spec["warmup_s"])
    print("READY", flush=True)
    go = Path(spec["go"])
    while not go.exists():
        time.sleep(0.001)
    t0 = float(go.read_text())
    time.sleep(max(0.0, t0 + spec["start_s"] - time.monotonic()))
    log = stream(device, launch, BATCH[spec["kind"]], t0 + spec["end_s"])
    _say(spec, f"{log[-1][1]} kernels in {log[-1][0] - log[0][0]:.2f} s")
    return {"t0": t0, "log": log}


def main(spec: dict[str, Any]) -> int:
    try:
        result = _seen()
        device = _device(spec["backend"])
        result["device"] = device.describe()
        result.update(solo(spec, device) if spec["role"] == "solo" else tenant(spec, device))
    except Exception as exc:  # the orchestrator records the failure against this case and goes on
        traceback.print_exc(file=sys.stderr)
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps(result))
    return 0
