"""``hami-devices monitor``: device-wide readings and per-allocation usage."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.cli.common import add_json, add_source, found_from, ledger_from, report_missing
from hami_devices.cli.output import emit_json, print_table
from hami_devices.models import NOT_AVAILABLE, Grant, Metrics, MetricValue


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("monitor", help="report usage, health and allocations per device")
    add_source(parser, ledger=True)
    add_json(parser)
    parser.add_argument("--uuid", action="append", default=[], help="only this device (repeatable)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    ledger = ledger_from(args)
    try:
        found = found_from(args, ledger)
        devices = [d for d in found.devices if not args.uuid or d.uuid in args.uuid]
        metrics = [d.monitor() for d in devices]
        # shares on a vendor whose library did not load are still held: listed from the ledger, not hidden
        held = ledger.handles() if found.missing else []
        unread = [(h.id, g) for h in held for g in h.grants if g.vendor in found.missing]
    finally:
        ledger.close()
    if args.json:
        rows = [m.model_dump(mode="json") | {"node": d.info.node} for d, m in zip(devices, metrics, strict=True)]
        emit_json({"metrics": rows, "missing": found.missing, "unread": [_unread(i, g) for i, g in unread]})
        return report_missing(found)
    print_table(
        [
            "NODE", "DEVICE", "MODEL", "HEALTH", "MEM_USED/TOTAL", "UTIL%", "TEMP_C", "POWER_W", "ALLOC_MIB",
            "CORES", "SHARERS", "SPILLED_MIB",
        ],
        [
            [
                d.info.node,
                m.uuid,
                m.model,
                m.health.value,
                f"{m.memory_used_mib}/{m.memory_total_mib}",
                m.utilization_pct,
                m.temperature_c,
                m.power_w,
                m.allocated_memory_mib,
                m.allocated_cores,
                m.sharers,
                _spilled(m),
            ]
            for d, m in zip(devices, metrics, strict=True)
        ],
    )
    shares = [(d, m, a) for d, m in zip(devices, metrics, strict=True) for a in m.allocations]
    if shares:
        print()
        print_table(
            ["NODE", "DEVICE", "ALLOCATION", "NAMESPACE", "POD", "CONTAINER", "MEM_USED/LIMIT_MIB", "CORES",
             "CORE_POLICY", "UTIL%", "PROCS"],
            [
                [
                    d.info.node,
                    f"{m.model}#{d.info.index}",
                    a.handle_id,
                    a.metadata.get("namespace") or "-",
                    a.metadata.get("pod") or "-",
                    a.metadata.get("container") or "-",
                    f"{_mib(a.memory_used_mib)}/{a.memory_limit_mib}",
                    a.cores_limit,
                    a.core_policy,
                    a.utilization_pct,
                    len(a.processes),
                ]
                for d, m, a in shares
            ],
        )
    if unread:
        print("\nheld on devices whose library cannot be read (usage not available):")
        print_table(["NODE", "DEVICE", "ALLOCATION", "MEM_LIMIT_MIB", "CORES"],
                    [[g.node, g.uuid, i, g.memory_mib, g.cores] for i, g in unread])
    return report_missing(found)


def _unread(allocation: str, grant: Grant) -> dict[str, object]:
    return {"node": grant.node, "uuid": grant.uuid, "allocation": allocation, "memory_mib": grant.memory_mib,
            "cores": grant.cores}


def _mib(value: MetricValue) -> str:
    return f"{value:.0f}" if isinstance(value, int | float) else str(value)


def _spilled(metrics: Metrics) -> str:
    """What the device's allocations hold in host memory (virtual memory), MiB; n/a when no region says."""
    known = [a.memory_spilled_mib for a in metrics.allocations if isinstance(a.memory_spilled_mib, int | float)]
    return f"{sum(known):.0f}" if known else NOT_AVAILABLE
