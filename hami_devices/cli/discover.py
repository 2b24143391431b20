"""``hami-devices discover``: the devices of this node, or of an inventory."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.cli.common import add_json, add_source, found_from, report_missing
from hami_devices.cli.output import emit_json, print_table
from hami_devices.ledger import MemoryLedger


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("discover", help="list devices with their facts, health and traits")
    add_source(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    found = found_from(args, MemoryLedger())
    devices = found.devices
    if args.json:
        emit_json({"devices": [d.info.model_dump(mode="json") for d in devices], "missing": found.missing})
        return report_missing(found)
    rows = []
    for d in devices:
        info = d.info
        traits = info.traits
        rows.append(
            [
                info.node,
                info.vendor,
                info.index,
                info.model,
                info.uuid,
                info.memory_mib,
                info.health.value,
                "-" if info.numa_node is None else info.numa_node,
                ",".join(p.name for p in info.partitions[:4]) + ("..." if len(info.partitions) > 4 else ""),
                f"{traits.peak_tflops.get('bf16') or traits.peak_tflops.get('fp16', 0):g}" if traits else "-",
            ]
        )
    print_table(
        ["NODE", "VENDOR", "IDX", "MODEL", "UUID", "MEM_MIB", "HEALTH", "NUMA", "PARTITIONS", "FP16_TFLOPS"], rows
    )
    return report_missing(found)
