"""``hami-devices config schema|validate``."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.cli.output import emit_json
from hami_devices.config import config_schema, load_config


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("config", help="configuration schema and validation")
    sub = parser.add_subparsers(dest="config_verb", metavar="ACTION", required=True)
    schema = sub.add_parser("schema", help="print the JSON Schema of the configuration")
    schema.set_defaults(func=run_schema)
    validate = sub.add_parser("validate", help="check a configuration file")
    validate.add_argument("file", metavar="FILE")
    validate.add_argument("--json", action="store_true", help="print the normalised configuration as JSON")
    validate.set_defaults(func=run_validate)


def run_schema(args: argparse.Namespace) -> int:
    emit_json(config_schema())
    return 0


def run_validate(args: argparse.Namespace) -> int:
    config = load_config(args.file)
    if args.json:
        emit_json({"file": args.file, "valid": True, "config": config.model_dump(mode="json", by_alias=True)})
    else:
        print(f"{args.file}: valid")
    return 0
