"""Arguments and set-up shared by several verbs."""

from __future__ import annotations

import argparse

from hami_devices.cli.output import error
from hami_devices.config import HamiConfig, load_config
from hami_devices.device import Device
from hami_devices.discovery import Found, find_devices, missing_message
from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes import quantity
from hami_devices.ledger import Ledger, MemoryLedger
from hami_devices.ledger.opening import LEDGER_HELP, argument_type, open_ledger
from hami_devices.registry import load_vendors


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")


def add_source(parser: argparse.ArgumentParser, *, ledger: bool = False) -> None:
    parser.add_argument("--inventory", metavar="FILE", help="run on the simulated back end built from FILE")
    parser.add_argument("--config", metavar="FILE", help="configuration YAML")
    parser.add_argument(
        "--vendor", action="append", dest="vendors", metavar="NAME", help="only this vendor (repeatable)"
    )
    add_node_name(parser)
    if ledger:
        add_ledger(parser)


def add_ledger(parser: argparse.ArgumentParser, help: str = LEDGER_HELP) -> None:
    """``--ledger FILE|URL``: a SQLite file, or a ``postgresql://`` URL (kept a string: a Path folds ``//``)."""
    parser.add_argument("--ledger", metavar="FILE|URL", type=argument_type, help=help)


def add_node_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-name", metavar="NAME",
                        help="this node's name for discovered devices (default: node-name in --config, then "
                        "$NODE_NAME, then the host's name)")


def quantity_count(text: str) -> int:
    """An argparse type: a count read as Kubernetes reads a device resource (``4000``, ``4k``, ``16Ki``)."""
    try:
        return quantity.count(text, "value")
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def config_from(args: argparse.Namespace) -> HamiConfig:
    return load_config(args.config) if getattr(args, "config", None) else HamiConfig()


def ledger_from(args: argparse.Namespace) -> Ledger:
    if not hasattr(args, "ledger"):
        return MemoryLedger()
    return open_ledger(args.ledger)


def devices_from(args: argparse.Namespace, ledger: Ledger) -> list[Device]:
    return found_from(args, ledger).devices


def found_from(args: argparse.Namespace, ledger: Ledger) -> Found:
    """The devices, and the expected vendors whose library cannot be loaded (``discovery.find_devices``)."""
    config = config_from(args)
    registry = load_vendors(args.vendors, config)
    return find_devices(args.inventory, vendors=args.vendors, config=config, ledger=ledger, registry=registry,
                        node=getattr(args, "node_name", None))


def report_missing(found: Found) -> int:
    """Say on stderr which expected vendors cannot be used; the exit status: 1 when any, else 0."""
    if not found.missing:
        return 0
    error(f"DeviceUnavailable: {missing_message(found.missing)}")
    return 1
