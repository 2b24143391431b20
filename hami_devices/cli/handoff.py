"""``hami-devices prepare`` / ``unprepare``: the node's side of an allocation a scheduler committed elsewhere."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from hami_devices.cli.common import add_ledger, add_node_name, config_from
from hami_devices.cli.output import emit_json
from hami_devices.errors import AmbiguousEnvironment
from hami_devices.handoff import prepare, unprepare
from hami_devices.ledger.opening import open_ledger


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "prepare",
        help="on the node: create an allocation's limiter regions here and print its environment with this "
        "node's paths",
    )
    parser.add_argument("handle_id", metavar="HANDLE_ID")
    add_ledger(parser, "the ledger the scheduler committed to: a SQLite file or a postgresql:// URL")
    parser.add_argument("--config", metavar="FILE", help="configuration YAML")
    add_node_name(parser)
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--json", action="store_true", help="print {'node/vendor': {variable: value}} as JSON")
    how.add_argument("--export", action="store_true", help="print 'export NAME=value' lines for a shell's eval")
    parser.set_defaults(func=run_prepare)

    parser = subparsers.add_parser(
        "unprepare", help="on the node: remove an allocation's limiter regions here (after its workload ended)"
    )
    parser.add_argument("handle_id", metavar="HANDLE_ID")
    parser.add_argument("--config", metavar="FILE", help="configuration YAML")
    add_node_name(parser)
    parser.add_argument("--force", action="store_true", help="remove them even while workload processes use them")
    parser.add_argument("--json", action="store_true", help="print the removed region files as JSON")
    parser.set_defaults(func=run_unprepare)


def run_prepare(args: argparse.Namespace) -> int:
    ledger = open_ledger(args.ledger)
    try:
        environments = prepare(args.handle_id, ledger, node=args.node_name, config=config_from(args))
    finally:
        ledger.close()
    if args.json:
        emit_json(environments)
        return 0
    merged: dict[str, str] = {}
    for env in environments.values():  # one process group on a node is the rule; several vendors' differ
        clash = {k for k in env if k in merged and merged[k] != env[k]}
        if clash:
            raise AmbiguousEnvironment(f"allocation {args.handle_id} has several process groups here "
                                       f"({sorted(environments)}) whose {sorted(clash)} differ: use --json")
        merged.update(env)
    for name, value in sorted(merged.items()):
        print(f"export {name}={shlex.quote(value)}" if args.export else f"{name}={value}")
    return 0


def run_unprepare(args: argparse.Namespace) -> int:
    removed = unprepare(args.handle_id, node=args.node_name, config=config_from(args), force=args.force)
    if args.json:
        emit_json({"removed": removed})
    else:
        print(f"removed {len(removed)} region file(s) of {args.handle_id}")
    return 0
