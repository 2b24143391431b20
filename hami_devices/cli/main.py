"""Entry point: one sub-command per verb module."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from hami_devices import __version__
from hami_devices.cli.output import error
from hami_devices.errors import HamiError
from hami_devices.extras import missing_extra

VERB_MODULES = (
    "vendors",
    "discover",
    "inventory",
    "allocate",
    "release",
    "handoff",
    "monitor",
    "allocations",
    "schedule",
    "size",
    "simulate",
    "config",
    "conformance",
    "dra",
    "extender",
    "ray",
    "exporter",
    "events",
    "usage",
    "queues",
    "doctor",
    "defrag",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hami-devices",
        description="Discover, score, share and monitor heterogeneous AI accelerators.",
    )
    parser.add_argument("--version", action="version", version=f"hami-devices {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name in VERB_MODULES:
        importlib.import_module(f"hami_devices.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except HamiError as exc:
        error(f"{type(exc).__name__}: {exc}")
        return 2
    except ModuleNotFoundError as exc:
        # a verb reached an optional dependency the base install leaves out: name the extra, not a traceback
        missing = missing_extra(exc, f"hami-devices {args.verb}")
        if missing is None:
            raise
        error(f"MissingExtra: {missing}")
        return 2
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
