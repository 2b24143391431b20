"""``hami-devices doctor``: check this node before deploying (vendor libraries, limiter, ledger, context)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from hami_devices.cli.common import add_json, add_ledger
from hami_devices.cli.output import emit_json
from hami_devices.ledger.opening import ledger_target
from hami_devices.ledger.paths import default_ledger_target


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check this node: vendor libraries and devices, the limiter, the ledger, the context",
        description="Each check prints PASS, WARN or FAIL with one line of why and what to do. Exit status: 0 "
        "when all pass, 1 when some warn, 2 when some fail. Read-only: the ledger is opened read-only and the "
        "limiter probe allocates a few MiB for a moment in a temporary region.",
    )
    add_json(parser)
    parser.add_argument("--config", metavar="FILE", help="configuration YAML to validate (default: $HAMI_CONFIG)")
    parser.add_argument(
        "--vendor", action="append", dest="vendors", metavar="NAME", help="only this vendor (repeatable)"
    )
    add_ledger(
        parser,
        "ledger to check: a SQLite file or a postgresql:// URL (default: $HAMI_LEDGER or "
        "~/.local/state/hami-devices/ledger.db)",
    )
    parser.add_argument(
        "--dev-root",
        metavar="DIR",
        type=Path,
        default=Path("/dev"),
        help="where the device nodes are (default: /dev; e.g. the host's /dev mounted elsewhere)",
    )
    parser.add_argument(
        "--kubelet-dir",
        metavar="DIR",
        type=Path,
        help="the kubelet plugin folder a DRA node plugin needs (checked in a pod by default)",
    )
    parser.add_argument(
        "--inventory",
        metavar="FILE",
        type=Path,
        help="show the configuration's node-config values on this inventory's nodes (default: this node)",
    )
    parser.add_argument(
        "--no-limiter-probe",
        dest="limiter_probe",
        action="store_false",
        help="skip running a short workload under each limiter shim",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hami_devices.doctor import Options, Status, run_doctor

    options = Options(
        ledger=args.ledger or ledger_target(default_ledger_target(), field="HAMI_LEDGER"),
        config=args.config or os.environ.get("HAMI_CONFIG") or None,
        vendors=args.vendors,
        dev_root=args.dev_root,
        limiter_probe=args.limiter_probe,
        kubelet_dir=args.kubelet_dir,
        inventory=args.inventory,
    )
    report = run_doctor(options)
    if args.json:
        emit_json(report.to_dict())
        return report.exit_code
    width = max(len(c.id) for c in report.checks)
    for check in report.checks:
        print(f"{check.status.value:<4}  {check.id:<{width}}  {check.why}")
        if check.action and check.status is not Status.PASS:
            print(f"{'':<4}  {'':<{width}}  -> {check.action}")
    counts = report.counts()
    print(f"\ndoctor: {counts['PASS']} pass, {counts['WARN']} warn, {counts['FAIL']} fail")
    return report.exit_code
