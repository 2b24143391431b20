"""``hami-devices extender``: serve the kube-scheduler extender protocol over the engine and a durable ledger."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from hami_devices.cli.common import add_ledger, config_from
from hami_devices.errors import InvalidRequest
from hami_devices.ledger.opening import open_ledger


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "extender",
        help="serve kube-scheduler's extender verbs (filter, prioritize, preempt, bind) with the engine",
        description="A kube-scheduler HTTP extender (k8s.io/kube-scheduler/extender/v1). Binds commit through "
        "the durable ledger; see examples/extender/ for the KubeSchedulerConfiguration. Needs the [kubernetes] "
        "extra.",
    )
    parser.add_argument("--listen", default="127.0.0.1:8888", metavar="HOST:PORT",
                        help="address to serve on (default 127.0.0.1:8888, loopback only; port 0 picks one)")
    parser.add_argument("--inventory", required=True, metavar="FILE", help="cluster inventory YAML (the nodes)")
    parser.add_argument("--config", metavar="FILE", help="configuration YAML (policy, memory factor, MIG mode)")
    add_ledger(parser)
    parser.add_argument("--policy", help="default placement policy (a pod's hami.io/gpu-scheduler-policy wins)")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S",
                        help="per-request deadline in seconds, below kube-scheduler's httpTimeout (default 5)")
    parser.add_argument("--lease", type=float, default=30.0, metavar="S",
                        help="seconds a committed bind may stay unconfirmed by the API server before the reaper "
                        "settles it (default 30; must exceed --timeout)")
    parser.add_argument("--maintenance", type=float, default=10.0, metavar="S",
                        help="resync with the ledger and reap expired leases every S seconds (default 10; 0: never)")
    parser.add_argument("--max-body", type=int, default=16 * 1024 * 1024, metavar="BYTES",
                        help="largest request body accepted (default 16 MiB)")
    parser.add_argument("--workers", type=int, default=32, help="verbs handled at once (default 32)")
    parser.add_argument("--binder", default="kubernetes", metavar="KIND",
                        help="'kubernetes' (the API server: in-cluster, else --kubeconfig or ~/.kube/config) or "
                        "'record:FILE' (hami_devices.testing's test double, for tests and benchmarks: binds are "
                        "appended to FILE as JSON lines and no API server is called)")
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig for --binder kubernetes")
    parser.add_argument("--record-delay", type=float, default=0.0, metavar="S",
                        help="with --binder record:FILE, wait S seconds in each bind (a slow API server)")
    parser.add_argument("--json", action="store_true", help="print the start-up line as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hami_devices.kubernetes.extender import ApiServerBinder, Extender, PodBinder, ServerSettings, serve

    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise InvalidRequest("--listen", f"expected HOST:PORT, got {args.listen!r}")
    if args.lease <= args.timeout:
        raise InvalidRequest("--lease", "must be longer than --timeout, or a slow bind's lease could run out under it")
    binder: PodBinder
    if args.binder.startswith("record:"):
        from hami_devices.testing import FileRecordingBinder

        binder = FileRecordingBinder(args.binder.split(":", 1)[1], delay_s=args.record_delay)
    elif args.binder == "kubernetes":
        binder = ApiServerBinder(kubeconfig=args.kubeconfig, timeout_s=args.timeout / 2)
    else:
        raise InvalidRequest("--binder", f"expected 'kubernetes' or 'record:FILE', got {args.binder!r}")
    ledger = open_ledger(args.ledger)
    extender = Extender(args.inventory, ledger, binder, config_from(args), policy=args.policy, lease_s=args.lease)
    counts = extender.reap()
    settings = ServerSettings(host.strip("[]"), int(port), args.timeout, args.max_body, args.workers, args.maintenance)
    server = serve(extender, settings)
    info = {
        "url": server.url,
        "nodes": len(extender.cluster.nodes),
        "devices": sum(len(d) for d in extender.devices.values()),
        "allocations": len(extender.cluster.bookings),
        "policy": extender.engine.policy.name,
        "reaped": counts,
    }
    if args.json:
        print(json.dumps(info), flush=True)
    else:
        print(f"hami-devices extender on {info['url']}: {info['nodes']} nodes, {info['devices']} devices, "
              f"{info['allocations']} allocations, policy {info['policy']}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.close()  # the ledger's connections belong to the worker threads; they close with the process
    print("hami-devices extender stopped", file=sys.stderr)
    return 0

