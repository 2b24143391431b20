"""``hami-devices schedule``: place each task of a workload on an inventory with the scoring engine."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.assembly import build_engine
from hami_devices.cli.output import emit_json, print_table
from hami_devices.errors import InsufficientResources
from hami_devices.scheduling.engine import Placement
from hami_devices.scheduling.policies import BUILTIN
from hami_devices.workload import load_workload


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "schedule",
        help="place a workload on an inventory and say why",
        description="Places the tasks one by one, in file order, booking each placement before the next.",
    )
    parser.add_argument("--inventory", required=True, metavar="FILE", help="cluster inventory YAML")
    parser.add_argument("--workload", required=True, metavar="FILE", help="workload YAML")
    parser.add_argument(
        "--policy",
        help=f"policy name (built in: {', '.join(BUILTIN)}; or from --policies); "
        "default: scheduler.policy of --config, else binpack",
    )
    parser.add_argument("--config", metavar="FILE", help="configuration YAML (policy, overcommit, split count)")
    parser.add_argument("--policies", metavar="FILE", help="YAML file of user policies")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    parser.add_argument(
        "--explain", action="store_true", help="show the score breakdown, and reason codes for unplaced tasks"
    )
    parser.set_defaults(func=run)


def _grant_text(p: Placement) -> str:
    return ", ".join(f"{g.node}/{g.model}#{g.index}({g.memory_mib}MiB,{g.cores}%)" for g in p.grants)


def run(args: argparse.Namespace) -> int:
    engine = build_engine(args.inventory, args.config, policy=args.policy, policies=args.policies)
    results: list[dict[str, Any]] = []
    for request in load_workload(args.workload):
        entry: dict[str, Any] = {"task": request.name, "task_type": str(request.task_type)}
        try:
            placement = engine.schedule(request)
        except InsufficientResources as exc:
            entry.update(
                placed=False,
                permanent=exc.permanent,
                counts={str(k): v for k, v in exc.counts.items()},
                nearest=exc.nearest,
                reasons={k: [str(c) for c in v] for k, v in exc.reasons.items()},
            )
        else:
            entry.update(placed=True, **placement.to_dict())
            entry.pop("request", None)
        results.append(entry)
    placed = sum(1 for r in results if r["placed"])
    if args.json:
        emit_json({"policy": engine.policy.name, "placed": placed, "tasks": len(results), "results": results})
        return 0 if placed == len(results) else 1
    rows = []
    for r in results:
        if r["placed"]:
            where = ", ".join(f"{g['node']}/{g['model']}#{g['index']}" for g in r["grants"])
            rows.append([r["task"], r["task_type"], r["node"], where, f"{r['score']:.1f}"])
        else:
            rows.append([r["task"], r["task_type"], "-", "UNPLACED", "-"])
    print(f"policy: {engine.policy.name} ({engine.policy.description})")
    print_table(["TASK", "TYPE", "NODE", "DEVICES", "SCORE"], rows)
    if args.explain:
        weights = ", ".join(f"{k}={v:g}" for k, v in engine.weights.items())
        print(f"\nscore = weighted mean of scorers ({weights}), each 0..100")
        for r in results:
            print(f"\n{r['task']}:")
            if r["placed"]:
                for g in r["grants"]:
                    part = f" part {g['part']}" if g["part"] else ""
                    print(
                        f"  {g['node']}/{g['model']}#{g['index']}{part}: {g['memory_mib']} MiB, {g['cores']}% cores"
                        + (f", partition {g['partition']}" if g["partition"] else "")
                    )
                print_table(
                    ["SCORER", "SCORE", "WEIGHT"],
                    [[k, f"{v:.1f}", f"{r['weights'][k]:g}"] for k, v in r["breakdown"].items()],
                    indent="  ",
                )
            else:
                nodes = {k: v for k, v in r["reasons"].items() if k in engine.cluster.nodes}
                print("  not placed; why each node was rejected:")
                print_table(["NODE", "REASONS"], [[k, ", ".join(v)] for k, v in sorted(nodes.items())], indent="  ")
    print(f"\n{placed}/{len(results)} tasks placed")
    return 0 if placed == len(results) else 1
