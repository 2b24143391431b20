"""``hami-devices dra``: the Kubernetes DRA driver pieces, file in and YAML out.

``publish`` prints the DeviceClasses and ResourceSlices a driver would apply;
``allocate`` allocates a ResourceClaim on published slices with the scheduling
engine and prints the claim with ``status.allocation``; ``prepare``/``unprepare`` do
on a node what the kubelet plugin does (ledger allocation and CDI spec); ``plugin``
serves the kubelet plugin itself (DRA gRPC service and plugin registration).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from hami_devices.cli.common import add_ledger, config_from
from hami_devices.errors import InvalidRequest
from hami_devices.extras import require
from hami_devices.ledger.opening import open_ledger


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
        add_ledger(p)
        p.add_argument("--cdi-dir", type=Path, default=Path("/var/run/cdi"), help="CDI spec directory")
        p.add_argument("--config", metavar="FILE", help="configuration YAML")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=_prepare if name == "prepare" else _unprepare)

    serve = verbs.add_parser(
        "plugin", help="serve the kubelet plugin: the DRA gRPC service and the kubelet's plugin registration"
    )
    serve.add_argument("--inventory", metavar="FILE", help="simulated back end (default: the hardware)")
    serve.add_argument("--node", default=os.environ.get("NODE_NAME"),
                       help="this node's name, the pool (default: $NODE_NAME)")
    add_ledger(serve)
    serve.add_argument("--cdi-dir", type=Path, default=Path("/var/run/cdi"), help="CDI spec directory")
    serve.add_argument("--config", metavar="FILE", help="configuration YAML")
    serve.add_argument("--registry-dir", type=Path, metavar="DIR",
                       help="the kubelet's plugin registry (default /var/lib/kubelet/plugins_registry)")
    serve.add_argument("--plugin-dir", type=Path, metavar="DIR",
                       help="where the DRA socket goes (default /var/lib/kubelet/plugins/hami-devices.io)")
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--kubeconfig", metavar="FILE",
                        help="read claims from this API server (default: the pod's service account)")
    source.add_argument("--claims-dir", type=Path, metavar="DIR",
                        help="read allocated claims from YAML/JSON files here instead of an API server")
    serve.add_argument("--workers", type=int, default=16, help="concurrent gRPC calls (default 16)")
    serve.set_defaults(func=_serve_plugin)


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
    from hami_devices.registry import load_vendors

    config = config_from(args)
    ledger = open_ledger(args.ledger)
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


def _serve_plugin(args: argparse.Namespace) -> int:
    require("kubernetes", "hami-devices dra plugin")
    require("grpc", "hami-devices dra plugin")
    require("google.protobuf", "hami-devices dra plugin")
    from hami_devices.kubernetes.dra.plugin.claim_sources import ApiServerClaims, ClaimSource, DirectoryClaims
    from hami_devices.kubernetes.dra.plugin.server import KubeletPlugin, SocketPaths
    from hami_devices.kubernetes.dra.plugin.service import DraService

    if not args.node:
        raise InvalidRequest("node", "name this node with --node or $NODE_NAME")
    paths = SocketPaths.under(args.registry_dir, args.plugin_dir)
    claims: ClaimSource = (DirectoryClaims(args.claims_dir) if args.claims_dir
                           else ApiServerClaims(kubeconfig=args.kubeconfig))
    plugin = KubeletPlugin(DraService(_plugin(args), claims), paths, workers=args.workers)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    plugin.start()
    print(f"hami-devices dra plugin: serving {paths.dra}, registration at {paths.registration}",
          file=sys.stderr, flush=True)
    stopping.wait()
    plugin.stop()
    return 0
