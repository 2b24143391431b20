"""``hami-devices vendors``: every vendor plugin, loaded or why not, and whether its library is here."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.cli.common import add_json, config_from
from hami_devices.cli.output import emit_json, print_table
from hami_devices.registry import load_vendors


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("vendors", help="list vendor plugins and their status")
    add_json(parser)
    parser.add_argument("--config", metavar="FILE", help="configuration YAML")
    parser.set_defaults(func=run)


DETAIL_WIDTH = 100
"""Table cells are clipped for people; ``--json`` carries the whole text."""


def _clip(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= DETAIL_WIDTH else text[: DETAIL_WIDTH - 3] + "..."


def run(args: argparse.Namespace) -> int:
    registry = load_vendors(config=config_from(args))
    rows: list[dict[str, Any]] = []
    for name, probe in registry.probes().items():
        adapter = registry.adapters[name]
        rows.append(
            {
                "name": name,
                "loaded": True,
                "version": adapter.version,
                "module": type(adapter).__module__,
                "hardware_available": probe.available,
                "detail": probe.detail,
                "library": probe.library,
                "capabilities": sorted(adapter.capabilities),
                "visible_devices_env": list(adapter.visible_devices_env),
            }
        )
    for name, failure in registry.failures.items():
        rows.append({"name": name, "loaded": False, "entry_point": failure.entry_point, "error": failure.error})
    rows.sort(key=lambda r: r["name"])
    if args.json:
        emit_json({"vendors": rows})
        return 0
    print_table(
        ["VENDOR", "LOADED", "HARDWARE", "DETAIL"],
        [
            [
                r["name"],
                "yes" if r["loaded"] else "NO",
                ("yes" if r.get("hardware_available") else "no") if r["loaded"] else "-",
                _clip(r.get("detail") if r["loaded"] else r["error"]),
            ]
            for r in rows
        ],
    )
    return 0
