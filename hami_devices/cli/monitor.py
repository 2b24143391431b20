"""``hami-devices monitor``: device-wide readings and per-allocation usage."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.cli.common import add_json, add_source, devices_from, ledger_from
from hami_devices.cli.output import emit_json, print_table
from hami_devices.models import NOT_AVAILABLE, Metrics


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("monitor", help="report usage, health and allocations per device")
    add_source(parser, ledger=True)
    add_json(parser)
    parser.add_argument("--uuid", action="append", default=[], help="only this device (repeatable)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    ledger = ledger_from(args)
    try:
        devices = [d for d in devices_from(args, ledger) if not args.uuid or d.uuid in args.uuid]
        metrics = [d.monitor() for d in devices]
    finally:
        ledger.close()
    if args.json:
        emit_json({"metrics": [m.model_dump(mode="json") for m in metrics]})
        return 0
    print_table(
        [
            "DEVICE", "MODEL", "HEALTH", "MEM_USED/TOTAL", "UTIL%", "TEMP_C", "POWER_W", "ALLOC_MIB", "CORES",
            "SHARERS", "SPILLED_MIB",
        ],
        [
            [
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
            for m in metrics
        ],
    )
    return 0


def _spilled(metrics: Metrics) -> str:
    """What the device's allocations hold in host memory (virtual memory), MiB; n/a when no region says."""
    known = [a.memory_spilled_mib for a in metrics.allocations if isinstance(a.memory_spilled_mib, int | float)]
    return f"{sum(known):.0f}" if known else NOT_AVAILABLE
