"""``hami-devices ray``: start a Ray node whose resources are its devices, with the plugin that grants them.

``ray resources`` prints the custom resources a node offers; ``ray start [OPTIONS] -- ARGS``
runs ``ray start --resources=... ARGS`` with the node's set-up (``HAMI_*``) and the
runtime-env plugin in its environment (``--dry-run`` prints the command instead).
Ray itself is needed only by ``start`` (the ``[ray]`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from hami_devices.cli.common import add_json, add_source
from hami_devices.cli.output import emit_json, print_table
from hami_devices.errors import InvalidRequest
from hami_devices.ledger.paths import default_ledger_target


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("ray", help="Ray nodes with hard accelerator shares")
    verbs = parser.add_subparsers(dest="ray_verb", metavar="ACTION", required=True)
    resources = verbs.add_parser("resources", help="the Ray custom resources this node's devices offer")
    _add_node(resources)
    add_json(resources)
    resources.set_defaults(func=run_resources)
    start = verbs.add_parser(
        "start",
        help="run `ray start` with this node's resources and the hami runtime-env plugin",
        description="Arguments after -- go to `ray start` (e.g. -- --head --num-cpus 8).",
    )
    _add_node(start)
    add_json(start)
    start.add_argument("--dry-run", action="store_true", help="print the command and its environment; run nothing")
    start.add_argument("ray_args", nargs=argparse.REMAINDER, help="-- then the arguments of `ray start`")
    start.set_defaults(func=run_start)


def _add_node(parser: argparse.ArgumentParser) -> None:
    add_source(parser, ledger=True)
    parser.add_argument("--node", help="which inventory node this Ray node is (inventories with several nodes)")


def _setup(args: argparse.Namespace) -> Any:
    from hami_devices.integrations.ray.node import NodeSetup

    return NodeSetup(
        ledger=args.ledger or default_ledger_target(),
        inventory=Path(args.inventory) if args.inventory else None,
        node=args.node,
        config=Path(args.config) if args.config else None,
        vendors=tuple(args.vendors or ()),
    )


def run_resources(args: argparse.Namespace) -> int:
    from hami_devices.integrations.ray.node import offered_resources

    resources = offered_resources(_setup(args))
    if args.json:
        emit_json({"resources": resources})
    else:
        print_table(["resource", "free"], [[k, f"{v:g}"] for k, v in resources.items()])
    return 0


def run_start(args: argparse.Namespace) -> int:
    from hami_devices.integrations.ray.node import node_labels, offered_resources

    setup = _setup(args)
    extra = [a for a in args.ray_args if a != "--"] if args.ray_args[:1] == ["--"] else list(args.ray_args)
    if any(a.startswith("--resources") for a in extra):
        raise InvalidRequest("--resources", "the node's resources come from its devices; do not pass them to ray")
    resources = offered_resources(setup)
    labels = ",".join(f"{k}={v}" for k, v in node_labels(setup).items())
    # theirs after ours: Ray takes the last --labels, so theirs are merged into one
    theirs = [a.partition("=")[2] for a in extra if a.startswith("--labels=")]
    extra = [a for a in extra if not a.startswith("--labels=")]
    if "--labels" in extra:
        raise InvalidRequest("--labels", "give Ray node labels as --labels=K=V,... so the node's own are kept")
    ray = shutil.which("ray", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    command = [ray or "ray", "start", f"--resources={json.dumps(resources)}",
               f"--labels={','.join([labels, *theirs])}", *extra]
    environment = setup.environment()
    if args.dry_run:
        if args.json:
            emit_json({"command": command, "environment": environment})
        else:
            print(" ".join(f"{k}={shlex.quote(v)}" for k, v in environment.items()), shlex.join(command))
        return 0
    if ray is None:
        raise InvalidRequest("ray", "the `ray` command is not installed: pip install 'hami-devices[ray]'")
    os.execvpe(ray, command, {**os.environ, **environment})
