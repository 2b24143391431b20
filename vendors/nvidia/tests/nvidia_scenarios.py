"""Scenarios the tests run in a fresh process each (pynvml keeps one library per process).

Usage: python nvidia_scenarios.py NAME [MIG_MODE]; the environment selects the fake
NVML (HAMI_NVML_LIBRARY) and its fixture (HAMI_FAKE_NVML_FIXTURE).  Prints one
JSON object.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import hami_devices
from hami_devices.config import parse_config
from hami_devices.errors import HamiError, InsufficientResources, VendorLibraryError
from hami_devices.ledger import MemoryLedger
from hami_devices.registry import load_vendors


def _devices(mig_mode: str = "disabled") -> list[Any]:
    config = parse_config({"device-plugin": {"mig-mode": mig_mode, "isolation-level": "none"}})
    registry = load_vendors(["nvidia"], config)
    return hami_devices.discover(ledger=MemoryLedger(), registry=registry, config=config)


def _error(exc: HamiError) -> dict[str, Any]:
    out: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, InsufficientResources):
        out["codes"] = sorted(exc.codes)
    if isinstance(exc, VendorLibraryError):
        out["code"] = exc.code
        out["function"] = exc.function
    return out


def monitor(reads: int = 1) -> dict[str, Any]:
    """Each device monitored ``reads`` times (an agent's polls); the last reading of each."""
    devices = _devices()
    for _ in range(reads - 1):
        for device in devices:
            device.monitor()
    return {"metrics": [d.monitor().model_dump(mode="json") for d in devices]}


def pair(topology: str) -> dict[str, Any]:
    devices = _devices()
    handle = hami_devices.allocate(devices, {"topology": topology, "parts": [{"count": 2, "cores": 100}]})
    second = hami_devices.allocate(devices, {"topology": topology, "parts": [{"count": 2, "cores": 100}]})
    return {
        "first": [g.index for g in handle.grants],
        "second": [g.index for g in second.grants],
        "env": handle.env,
    }


def mig(mode: str) -> dict[str, Any]:
    devices = _devices(mode)
    gpu = devices[0]
    steps: list[dict[str, Any]] = []

    def attempt(part: dict[str, Any]) -> Any:
        try:
            handle = hami_devices.allocate([gpu], {"parts": [part]})
        except HamiError as exc:
            steps.append(_error(exc))
            return None
        grant = handle.grants[0]
        steps.append(
            {
                "partition": grant.partition,
                "partition_uuid": grant.partition_uuid,
                "memory_mib": grant.memory_mib,
                "cores": grant.cores,
                "visible": handle.env.get("CUDA_VISIBLE_DEVICES"),
                "instances": _instances(gpu),
            }
        )
        return handle

    first = attempt({"partition": "auto", "memory_mib": 5000})
    attempt({"partition": "auto", "memory_mib": 5000})
    attempt({"memory_mib": 1000})
    if first is not None:
        gpu.release(first)
        steps.append({"released": first.grants[0].partition_uuid, "instances": _instances(gpu)})
    attempt({"partition": "2g.12gb"})
    return {"steps": steps}


def _instances(device: Any) -> list[dict[str, Any]]:
    return [
        {"profile": i.profile, "start": i.start, "uuid": i.uuid} for i in device.existing_instances()
    ]


def main() -> None:
    name = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else ""
    if name == "monitor":
        result = monitor(int(arg or 1))
    elif name == "pair":
        result = pair(arg)
    else:
        result = mig(arg)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
