"""``hami-devices events``: the lifecycle event log of a ledger (granted, refused, released, evicted,
process started/exited, device health, limiter refusal bursts)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from hami_devices.cli.common import add_json, add_ledger, add_source, devices_from
from hami_devices.cli.output import emit_json, print_table
from hami_devices.errors import InvalidRequest
from hami_devices.ledger import SCHEMA_VERSION, Event, EventKind, Ledger
from hami_devices.ledger.opening import LedgerTarget, open_ledger
from hami_devices.ledger.paths import default_ledger_target
from hami_devices.observability.timeparse import iso, parse_time


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "events",
        help="show the lifecycle event log (allocations, workload processes, device health)",
        description="Times: ISO 8601, Unix seconds, now, or an age such as 15m, 2h, 7d.",
    )
    add_ledger(parser, "ledger: a SQLite file or a postgresql:// URL (default: as for allocate)")
    parser.add_argument("--since", metavar="T", help="only events at or after T")
    parser.add_argument("--until", metavar="T", help="only events before T")
    parser.add_argument("--allocation", metavar="ID", help="only this allocation's events")
    parser.add_argument(
        "--kind", action="append", metavar="KIND", help=f"only this kind (repeatable): {', '.join(EventKind)}"
    )
    parser.add_argument("--limit", type=int, metavar="N", help="at most N events (the oldest first)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new events as they commit")
    parser.add_argument("--interval", type=float, default=0.5, metavar="S", help="poll interval with --follow")
    parser.add_argument(
        "--observe",
        action="store_true",
        help="with --follow: also act as the node's observer (as the exporter does), recording workload "
        "process starts and exits, device health changes and usage samples each interval",
    )
    parser.add_argument(
        "--prune-before", metavar="T",
        help="delete events and usage samples older than T (e.g. 90d) and exit; the grant of an allocation "
        "that is live or ended later is kept",
    )
    add_source(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def open_existing(target: LedgerTarget | None) -> Ledger:
    """Readers must not create an empty ledger where the user mistyped a path (a database is not a path)."""
    target = target or default_ledger_target()
    if isinstance(target, Path) and not target.exists():
        raise InvalidRequest("--ledger", f"no ledger at {target}")
    return open_ledger(target)


def detail(event: Event) -> str:
    """One short line of what matters for each kind."""
    d = event.data
    meta = " ".join(f"{k}={v}" for k, v in sorted((d.get("metadata") or {}).items()))
    if event.kind == EventKind.GRANTED:
        grants = ", ".join(f"{g['model']}#{g['index']}({g['memory_mib']}MiB,{g['cores']}%)" for g in d["grants"])
        return f"{grants} {meta}".strip()
    if event.kind == EventKind.REFUSED:
        counts = ", ".join(f"{code} x{n}" for code, n in (d.get("counts") or {}).items())
        return f"{d.get('message', '')}: {counts} {meta}".strip()
    if event.kind in (EventKind.RELEASED, EventKind.EVICTED):
        parts = [f"held {d.get('held_s', 0):.0f}s"]
        if d.get("reclaimer"):
            parts.append(f"by {d['reclaimer']}")
        if d.get("reason"):
            parts.append(f"({d['reason']})")
        return " ".join([*parts, meta]).strip()
    if event.kind in (EventKind.PROCESS_STARTED, EventKind.PROCESS_EXITED):
        text = f"pid {d.get('pid')}"
        if event.kind == EventKind.PROCESS_EXITED:
            status = d.get("exit_status")
            text += " exit status unknown" if status is None else f" exit status {status}"
        return f"{text} {meta}".strip()
    if event.kind == EventKind.REVOKED:
        return f"process(es) {', '.join(d.get('processes') or [])} refused further allocations {meta}".strip()
    if event.kind == EventKind.HEALTH_CHANGED:
        return f"{d.get('from') or '?'} -> {d.get('to')}"
    if event.kind == EventKind.LIMITER_REFUSALS:
        return f"{d.get('count')} {d.get('refusal', '')} refusals in {d.get('window_s')}s"
    return json.dumps(d, sort_keys=True)


def _row(event: Event) -> list[Any]:
    return [event.seq, iso(event.time), event.kind, event.allocation_id or "-", event.uuid or event.node or "-",
            detail(event)]


HEADERS = ["SEQ", "TIME", "KIND", "ALLOCATION", "DEVICE/NODE", "DETAIL"]
FOLLOW_WIDTHS = [6, 20, 21, 32, 40]
"""Column widths of ``--follow``, which prints each row as it comes (no table to measure): a sequence number, an
ISO time, the longest kind, an allocation id, a device uuid; longer values push the row, never cut it."""


def _follow_line(cells: list[Any]) -> str:
    padded = [str(c).ljust(w) for c, w in zip(cells, FOLLOW_WIDTHS, strict=False)]
    return "  ".join([*padded, *(str(c) for c in cells[len(FOLLOW_WIDTHS):])]).rstrip()


def run(args: argparse.Namespace) -> int:
    since = parse_time(args.since, "--since") if args.since else None
    until = parse_time(args.until, "--until") if args.until else None
    if args.limit is not None and args.limit < 1:
        raise InvalidRequest("--limit", "must be at least 1")
    if args.observe and not args.follow:
        raise InvalidRequest("--observe", "needs --follow")
    if args.limit is not None and args.follow:
        raise InvalidRequest("--limit", "cannot be combined with --follow (it would skip events)")
    ledger = open_existing(args.ledger)
    if args.prune_before:
        before = parse_time(args.prune_before, "--prune-before")
        try:
            with ledger.transaction() as view:
                removed = view.prune(before)
        finally:
            ledger.close()
        if args.json:
            emit_json({"pruned_events": removed, "before": before})
        else:
            print(f"pruned {removed} events (and usage samples) before {iso(before)}")
        return 0
    filters = {"since": since, "until": until, "allocation_id": args.allocation, "kinds": args.kind}
    try:
        events = ledger.events(**filters, limit=args.limit)
        if not args.follow:
            if args.json:
                emit_json({"schema_version": SCHEMA_VERSION, "events": [e.model_dump(mode="json") for e in events]})
            elif events:
                print_table(HEADERS, [_row(e) for e in events])
            else:
                print("no events", file=sys.stderr)
            return 0
        return _follow(ledger, events, filters, args)
    finally:
        ledger.close()


def _follow(ledger: Ledger, first: list[Event], filters: dict[str, Any], args: argparse.Namespace) -> int:
    """Print as events commit; seq order is commit order, so nothing is skipped or repeated."""
    last = max((e.seq or 0 for e in first), default=0)
    if not first:
        with ledger.reading() as view:
            last = view.last_seq() if filters["since"] is None else 0
    batch = first
    observe = None
    if args.observe:
        from hami_devices.observability.observer import Observer
        from hami_devices.observability.snapshot import Sampler

        sampler, observer = Sampler(devices_from(args, ledger), ledger), Observer(ledger)

        def observe() -> None:
            observer.observe(sampler.snapshot())

    if not args.json:
        print(_follow_line(HEADERS), flush=True)
        print(_follow_line(["-" * w for w in [*FOLLOW_WIDTHS, len(HEADERS[-1])]]), flush=True)
    try:
        while True:
            for event in batch:
                if args.json:
                    print(json.dumps(event.model_dump(mode="json")), flush=True)
                else:
                    print(_follow_line(_row(event)), flush=True)
                last = max(last, event.seq or 0)
            time.sleep(args.interval)
            if observe is not None:
                observe()
            batch = ledger.events(**filters, after_seq=last)
    except KeyboardInterrupt:
        return 0
