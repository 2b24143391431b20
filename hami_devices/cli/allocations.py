"""``hami-devices allocations [gc]``: live allocations with their processes and usage; clean up after dead ones."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.cli.common import config_from
from hami_devices.cli.output import emit_json, print_table
from hami_devices.errors import InvalidRequest
from hami_devices.ledger.opening import LEDGER_HELP, argument_type, open_ledger
from hami_devices.lifecycle import AllocationStatus, collect_garbage, list_allocations
from hami_devices.registry import load_vendors

DEFAULT_GRACE_S = 600.0


def _add_common(parser: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    # On the sub-action, SUPPRESS keeps a value given before "gc" from being reset by its default.
    default = argparse.SUPPRESS if inherited else None
    parser.add_argument(
        "--ledger",
        metavar="FILE|URL",
        type=argument_type,
        default=default,
        help=LEDGER_HELP,
    )
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS if inherited else False, help="print JSON for scripts"
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "allocations", help="list live allocations (age, processes, usage); 'gc' releases those whose workloads died"
    )
    _add_common(parser)
    parser.set_defaults(func=run_list)
    sub = parser.add_subparsers(dest="allocations_verb", metavar="ACTION")
    gc = sub.add_parser(
        "gc",
        help="release allocations whose workload processes are all gone and that are older than --grace; "
        "remove region files no allocation owns",
    )
    _add_common(gc, inherited=True)
    gc.add_argument("--config", metavar="FILE", help="configuration YAML (as given to allocate)")
    gc.add_argument(
        "--grace",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_GRACE_S,
        help=f"only allocations older than this (default {DEFAULT_GRACE_S:.0f}): a workload that has not "
        "started yet looks like one that has ended",
    )
    gc.add_argument("--dry-run", action="store_true", help="say what would be released or removed; change nothing")
    gc.set_defaults(func=run_gc)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _usage(status: AllocationStatus) -> str:
    if not status.devices:
        return "n/a"
    return " ".join(f"{d.memory_used_mib:.0f}/{d.memory_limit_mib:.0f}" for d in status.devices)


def run_list(args: argparse.Namespace) -> int:
    ledger = open_ledger(args.ledger)
    try:
        statuses = list_allocations(ledger)
    finally:
        ledger.close()
    if args.json:
        emit_json({"allocations": [s.to_json() for s in statuses]})
        return 0
    print_table(
        ["ID", "NAME", "NODE", "NAMESPACE", "POD", "AGE", "STATE", "DEVICES", "PROCS(LIVE/ALL)", "MEM_USED/LIMIT_MIB"],
        [
            [
                s.handle.id,
                s.handle.request.name or "-",
                s.handle.host or "-",
                s.handle.metadata.get("namespace") or "-",
                s.handle.metadata.get("pod") or "-",
                _age(s.age_s),
                s.state,
                ",".join(f"{g.uuid}:{g.memory_mib}m/{g.cores}%" for g in s.handle.grants),
                f"{s.live_processes}/{len(s.processes)}",
                _usage(s),
            ]
            for s in statuses
        ],
    )
    for s in statuses:
        for error in s.errors:
            print(f"  {s.handle.id}: {error}")
    return 0


def run_gc(args: argparse.Namespace) -> int:
    """Each action is also logged to ``hami_devices.lifecycle`` (INFO) for whoever embeds or wraps the verb."""
    if args.grace < 0:
        raise InvalidRequest("--grace", f"{args.grace} s is negative")
    ledger = open_ledger(args.ledger)
    try:
        registry = load_vendors(config=config_from(args))
        report = collect_garbage(ledger, registry.adapters, grace_s=args.grace, dry_run=args.dry_run)
    finally:
        ledger.close()
    if args.json:
        emit_json(report.to_json())
        return 0
    verb = {"release": "release", "remove-region": "remove"}
    outcome = {True: "done", False: "would be done (dry run)"}
    for action in report.actions:
        state = f"FAILED ({action.error})" if action.error else outcome[action.done]
        print(f"{verb[action.kind]} {action.target}: {action.reason} -- {state}")
    for target, reason in report.kept:
        print(f"keep {target}: {reason}")
    if not report.actions and not report.kept:
        print("no allocations and no region files")
    return 0
