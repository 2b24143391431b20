"""``hami-devices dra``: the Kubernetes DRA driver pieces, file in and YAML out.

``publish`` prints the DeviceClasses and ResourceSlices a driver would apply;
``allocate`` allocates a ResourceClaim on published slices with the scheduling
engine and prints the claim with ``status.allocation``; ``prepare``/``unprepare`` do
on a node what the kubelet plugin does (ledger allocation and CDI spec).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from hami_devices.cli.common import config_from, default_ledger_path
from hami_devices.errors import InvalidRequest
from hami_devices.extras import require


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dra",
        help="Kubernetes DRA: publish ResourceSlices, allocate ResourceClaims, prepare claims on a node",
        description="Needs the [kubernetes] extra (pip install 'hami-devices[kubernetes]').",
    )
    verbs = parser.add_subparsers(dest="dra_verb", metavar="ACTION", required=True)

    pub = verbs.add_parser("publish", help="print the DeviceClasses and ResourceSlices a driver would apply")
    pub.add_argument("--inventory", required=True, metavar="FILE", help="cluster inventory YAML")
    pub.add_argument("--node", help="only this node's pool")
    pub.add_argument("--config", metavar="FILE", help="configuration YAML (memory factor, MIG mode, split count)")
    pub.add_argument("--generation", type=int, default=0, help="pool generation before this publish (default 0)")
    pub.add_argument("--kubernetes", default="1.35", metavar="RELEASE",
                     help="the release whose slice rules to follow: 1.34 keeps a card's counters in its devices' "
                     "slice; 1.35 and newer (the default) put counter sets in slices of their own")
    pub.add_argument("--json", action="store_true", help="a JSON list instead of YAML documents")
    pub.set_defaults(func=_publish)

    alloc = verbs.add_parser("allocate", help="allocate a ResourceClaim on published ResourceSlices")
    alloc.add_argument(
        "--slices", required=True, metavar="FILE", help="YAML/JSON of ResourceSlices (and DeviceClasses)"
    )
    alloc.add_argument("--claim", required=True, metavar="FILE", help="the ResourceClaim (resource.k8s.io/v1)")
    alloc.add_argument(
        "--allocated", metavar="FILE", help="claims already allocated (their status.allocation is booked)"
    )
    alloc.add_argument("--config", metavar="FILE", help="configuration YAML")
    alloc.add_argument("--policy", help="placement policy (default: scheduler.policy of --config, else binpack)")
    alloc.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    alloc.set_defaults(func=_allocate)

    for name, helptext in (("prepare", "prepare an allocated claim on a node"),
                           ("unprepare", "release a prepared claim on a node")):
        p = verbs.add_parser(name, help=helptext)
        p.add_argument("--inventory", metavar="FILE", help="simulated back end (default: the hardware)")
        p.add_argument("--node", required=True, help="this node's name (the pool)")
        p.add_argument("--claim", required=True, metavar="FILE", help="the allocated ResourceClaim")
        p.add_argument("--ledger", type=Path, metavar="FILE", help="SQLite ledger (default: $HAMI_LEDGER ...)")
        p.add_argument("--cdi-dir", type=Path, default=Path("/var/run/cdi"), help="CDI spec directory")
        p.add_argument("--config", metavar="FILE", help="configuration YAML")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=_prepare if name == "prepare" else _unprepare)


def load_objects(path: str) -> list[dict[str, Any]]:
    """Every object in a YAML stream or JSON file (a list, or a ``List`` with ``items``)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidRequest("<file>", f"cannot read: {exc.strerror}", source=path) from None
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise InvalidRequest("<yaml>", f"not valid YAML: {exc}", source=path) from None
    out: list[dict[str, Any]] = []
    for doc in docs:
        if isinstance(doc, list):
            out.extend(doc)
        elif isinstance(doc, dict) and isinstance(doc.get("items"), list):
            out.extend(doc["items"])
        elif isinstance(doc, dict):
            out.append(doc)
    return out


def _emit(objects: list[dict[str, Any]] | dict[str, Any], as_json: bool) -> None:
    if as_json:
        json.dump(objects, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif isinstance(objects, list):
        yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)
    else:
        yaml.safe_dump(objects, sys.stdout, sort_keys=False)


def _publish(args: argparse.Namespace) -> int:
    require("kubernetes", "hami-devices dra publish")
    from hami_devices.kubernetes.dra.publish import publish_inventory

    objects = publish_inventory(args.inventory, config_from(args), node=args.node, generation=args.generation,
                                kubernetes=args.kubernetes)
    _emit(objects, args.json)
    return 0


def _one_claim(path: str) -> dict[str, Any]:
    claims = [o for o in load_objects(path) if o.get("kind") == "ResourceClaim"]
    if len(claims) != 1:
        raise InvalidRequest("kind", f"expected one ResourceClaim, found {len(claims)}", source=path)
    return claims[0]


def _allocate(args: argparse.Namespace) -> int:
    require("kubernetes", "hami-devices dra allocate")
    require("cel", "hami-devices dra allocate")  # CEL selectors
    from hami_devices.kubernetes.dra.allocator import DraAllocator
    from hami_devices.kubernetes.dra.claims import parse_claim

    allocator = DraAllocator(load_objects(args.slices), config_from(args), policy=args.policy)
    for held in load_objects(args.allocated) if args.allocated else []:
        if held.get("kind") == "ResourceClaim":
            allocator.book(parse_claim(held, source=args.allocated))
    claim = parse_claim(_one_claim(args.claim), source=args.claim)
    _emit(allocator.allocated(claim), args.json)
    return 0


def _plugin(args: argparse.Namespace) -> Any:
    from hami_devices.discovery import discover
    from hami_devices.kubernetes.dra.node import NodePlugin
    from hami_devices.ledger import SqliteLedger
    from hami_devices.registry import load_vendors

    config = config_from(args)
    ledger = SqliteLedger(args.ledger or default_ledger_path())
    devices = discover(args.inventory, config=config, ledger=ledger, registry=load_vendors(config=config))
    return NodePlugin(args.node, devices, ledger, args.cdi_dir)


def _prepare(args: argparse.Namespace) -> int:
    prepared = _plugin(args).prepare(_one_claim(args.claim))
    _emit(
        {
            "claimUID": prepared.claim_uid,
            "allocation": prepared.handle.id,
            "cdiSpec": str(prepared.spec_path),
            "devices": prepared.cdi_devices,
        },
        args.json,
    )
    return 0


def _unprepare(args: argparse.Namespace) -> int:
    from hami_devices.kubernetes.dra.claims import parse_claim

    claim = parse_claim(_one_claim(args.claim), source=args.claim)
    released = _plugin(args).unprepare(claim.uid)
    _emit({"claimUID": claim.uid, "released": released}, args.json)
    return 0
