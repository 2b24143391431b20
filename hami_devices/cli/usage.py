"""``hami-devices usage``: device-hours per namespace, pod, queue, workload, owner, device, allocation, DAG, task or
application,
weighted by the share granted and by what was used, per vendor and model (for chargeback)."""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

from hami_devices.cli.common import add_ledger
from hami_devices.cli.events import open_existing
from hami_devices.cli.output import emit_json, print_table
from hami_devices.observability.timeparse import iso, parse_time
from hami_devices.observability.usage import GROUPINGS, UsageRow, totals, usage_report

COLUMNS = [
    "group", "vendor", "model", "allocations", "device_hours", "memory_share_hours", "core_share_hours",
    "charged_share_hours", "used_memory_share_hours", "used_core_share_hours", "sampled_hours",
    "utilization_sampled_hours", "coverage",
]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "usage",
        help="share-weighted device-hours for chargeback, from the ledger's events and usage samples",
        description="device_hours counts each granted device whole; memory_share_hours and core_share_hours weigh "
        "it by the share granted; charged_share_hours by the larger of the two; used_* by what the workload "
        "actually held and computed, integrated between the samples the exporter recorded (sampled_hours is the time "
        "they cover, coverage its share of device_hours). "
        "Times: ISO 8601, Unix seconds, now, or an age such as 24h or 7d.",
    )
    add_ledger(parser, "ledger: a SQLite file or a postgresql:// URL (default: as for allocate)")
    parser.add_argument("--from", dest="since", required=True, metavar="T", help="start of the period")
    parser.add_argument("--to", dest="until", default="now", metavar="T", help="end of the period (default: now)")
    parser.add_argument("--by", required=True, choices=GROUPINGS, help="what to group by")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON for scripts")
    out.add_argument("--csv", action="store_true", help="print CSV (for spreadsheets and billing imports)")
    parser.set_defaults(func=run)


def _cells(row: UsageRow) -> list[Any]:
    data = row.to_dict()
    return [f"{data[c]:.3f}" if isinstance(data[c], float) else data[c] for c in COLUMNS]


def run(args: argparse.Namespace) -> int:
    since = parse_time(args.since, "--from")
    until = parse_time(args.until, "--to")
    ledger = open_existing(args.ledger)
    try:
        report = usage_report(ledger, since, until, args.by)
    finally:
        ledger.close()
    if args.json:
        emit_json({**report.to_dict(), "from_iso": iso(since), "to_iso": iso(until), "totals": totals(report)})
    elif args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in report.rows:
            data = row.to_dict()
            writer.writerow([data[c] for c in COLUMNS])
    else:
        print(f"usage by {args.by} from {iso(since)} to {iso(until)} (hours)")
        headers = [c.upper().replace("_HOURS", "_H") for c in COLUMNS]
        print_table(headers, [_cells(r) for r in report.rows])
    return 0
