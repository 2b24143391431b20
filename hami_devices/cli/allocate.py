"""``hami-devices allocate``: grant a request and print the handle and its environment."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hami_devices.allocation import allocate
from hami_devices.cli.common import add_json, add_source, found_from, ledger_from, quantity_count
from hami_devices.cli.output import emit_json, print_table
from hami_devices.discovery import missing_message
from hami_devices.errors import DeviceUnavailable, InsufficientResources, InvalidRequest
from hami_devices.models import CORE_POLICIES, ResourceRequest


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "allocate",
        help="allocate a share of one or more devices",
        description="Give the request as JSON (--request, '@FILE' or '-' for stdin) or with the shorthand flags.",
    )
    add_source(parser, ledger=True)
    add_json(parser)
    parser.add_argument("--request", metavar="JSON", help="a ResourceRequest as JSON, @FILE, or - for stdin")
    parser.add_argument("--count", type=int, default=1, help="devices wanted (shorthand)")
    parser.add_argument("--memory", type=quantity_count, metavar="MIB",
                        help="memory per device, a count of MiB read as Kubernetes reads nvidia.com/gpumem "
                        "(4096, 4k = 4000, 16Ki = 16384; shorthand)")
    parser.add_argument("--memory-percent", type=float, help="memory per device in percent (shorthand)")
    parser.add_argument("--cores", type=quantity_count, default=0,
                        help="compute percent per device, 100 = exclusive")
    parser.add_argument("--core-policy", choices=list(CORE_POLICIES),
                        help="how the cores are kept: cap (at most), share (at least, idle time on top) or "
                        "unlimited (booked, not paced); default: device-plugin.core-policy of --config, else cap "
                        "(shorthand)")
    parser.add_argument("--model", action="append", dest="models", default=[], help="accepted model (repeatable)")
    parser.add_argument("--partition", help="partition profile name or 'auto'")
    parser.add_argument("--task-type", default="batch", choices=["training", "inference", "batch", "interactive"])
    parser.add_argument("--name", help="task name")
    parser.add_argument("--policy", help="placement policy (default: scheduler.policy of --config, else binpack)")
    parser.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="workload identity kept with the allocation, e.g. --meta pod=web-0 --meta namespace=prod "
        "(workload, namespace, pod, container, queue, owner become exporter labels; repeatable)",
    )
    parser.set_defaults(func=run)


def _request_from(args: argparse.Namespace) -> ResourceRequest:
    if args.request:
        text = args.request
        if text == "-":
            text = sys.stdin.read()
        elif text.startswith("@"):
            text = Path(text[1:]).read_text()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidRequest("--request", f"not valid JSON: {exc}") from None
        return ResourceRequest.model_validate(data)
    part: dict[str, Any] = {"count": args.count, "cores": args.cores, "models": args.models}
    if args.memory is not None:
        part["memory_mib"] = args.memory
    if args.memory_percent is not None:
        part["memory_percent"] = args.memory_percent
    if args.partition:
        part["partition"] = args.partition
    if args.core_policy:
        part["core_policy"] = args.core_policy
    if args.vendors:
        part["vendors"] = args.vendors
    return ResourceRequest(name=args.name, task_type=args.task_type, parts=[part])


def metadata_from(pairs: list[str]) -> dict[str, str]:
    metadata: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidRequest("--meta", f"expected KEY=VALUE, got {pair!r}")
        metadata[key.strip()] = value
    return metadata


def run(args: argparse.Namespace) -> int:
    request = _request_from(args)
    metadata = metadata_from(args.meta)
    ledger = ledger_from(args)
    try:
        found = found_from(args, ledger)
        try:
            handle = allocate(found.devices, request, policy=args.policy, metadata=metadata)
        except InsufficientResources as refusal:
            if not found.missing:
                raise
            # "never fits" would blame the request for what a library that did not load hides
            loaded = f"on the devices that did load: {refusal}"
            raise DeviceUnavailable(f"{missing_message(found.missing)} ({loaded})") from refusal
    finally:
        ledger.close()
    if args.json:
        emit_json(handle.model_dump(mode="json"))
        return 0
    print(f"allocation {handle.id}")
    if handle.metadata:
        print("metadata: " + " ".join(f"{k}={v}" for k, v in sorted(handle.metadata.items())))
    print_table(
        ["NODE", "DEVICE", "MODEL", "MEM_MIB", "CORES", "CORE_POLICY", "PARTITION"],
        [[g.node, g.uuid, g.model, g.memory_mib, g.cores, g.core_policy, g.partition or "-"] for g in handle.grants],
    )
    for group, env in handle.environments.items():
        print(f"environment of {group}:" if len(handle.environments) > 1 else "environment:")
        for key, value in sorted(env.items()):
            print(f"  {key}={value}")
    return 0
