"""``hami-devices inventory schema``: the inventory file's JSON Schema, every field described."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.inventory_schema import inventory_schema_json


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("inventory", help="the inventory file format")
    verbs = parser.add_subparsers(dest="inventory_verb", metavar="VERB", required=True)
    schema = verbs.add_parser("schema", help="print the inventory's JSON Schema (draft 2020-12)")
    schema.set_defaults(func=run_schema)


def run_schema(args: argparse.Namespace) -> int:
    print(inventory_schema_json())
    return 0
