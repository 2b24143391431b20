"""``hami-devices release``: give an allocation back, exactly once."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.allocation import release_from
from hami_devices.cli.common import add_json, add_ledger, config_from
from hami_devices.cli.output import emit_json
from hami_devices.ledger import EventKind
from hami_devices.ledger.opening import open_ledger
from hami_devices.registry import load_vendors


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("release", help="release an allocation by its handle id")
    parser.add_argument("handle_id", metavar="HANDLE_ID")
    add_ledger(parser, "ledger: a SQLite file or a postgresql:// URL (default: as for allocate)")
    parser.add_argument("--config", metavar="FILE", help="configuration YAML (as given to allocate)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="release even while workload processes use it: their limiter then refuses every further allocation",
    )
    add_json(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    ledger = open_ledger(args.ledger)
    try:
        registry = load_vendors(config=config_from(args))
        handle = release_from(ledger, args.handle_id, registry.adapters, force=args.force)
        revoked = ledger.events(allocation_id=handle.id, kinds=[EventKind.REVOKED]) if args.force else []
    finally:
        ledger.close()
    processes = [p for event in revoked for p in event.data.get("processes", [])]
    if args.json:
        emit_json({"released": handle.model_dump(mode="json"), "revoked_processes": processes})
    else:
        print(f"released {handle.id} ({len(handle.grants)} device grant(s))")
        if processes:
            print(f"revoked: process(es) {', '.join(processes)} can allocate no more device memory")
    return 0
