"""``hami-devices simulate``: replay an openb trace with one or more placement policies."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from hami_devices.cli.output import emit_json, print_table
from hami_devices.simulate.plot import plot_curves
from hami_devices.simulate.policies import POLICIES
from hami_devices.simulate.protocol import DEFAULT_INFLATION, arrival_order
from hami_devices.simulate.replay import ReplayResult, replay
from hami_devices.simulate.trace import load_nodes, load_pods


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay a GPU-sharing trace (Alibaba openb) with placement policies",
        description="Follows the protocol of the openb README: sorted then seeded shuffle, inflation "
        "to 130%% of GPU capacity, no departures; reports unallocated GPU %% at arrived = 100%%.",
    )
    parser.add_argument("--nodes", required=True, metavar="CSV", help="openb node list")
    parser.add_argument("--pods", required=True, metavar="CSV", help="openb pod list")
    parser.add_argument(
        "--policy",
        action="append",
        dest="policies",
        metavar="P",
        help=f"policy (repeatable; known: {', '.join(POLICIES)}; default fragmentation-aware)",
    )
    parser.add_argument("--seed", type=int, default=42, help="shuffle/inflation seed (default 42)")
    parser.add_argument("--inflation", type=float, default=DEFAULT_INFLATION, help="arrivals up to this x capacity")
    parser.add_argument("--out", metavar="DIR", type=Path, default=Path("."), help="where curve.json/curve.png go")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    nodes = load_nodes(args.nodes)
    pods = load_pods(args.pods)
    policies = args.policies or ["fragmentation-aware"]
    for name in policies:
        if name not in POLICIES:
            print(f"hami-devices: error: unknown policy {name!r} (known: {', '.join(POLICIES)})", file=sys.stderr)
            return 2
    total = len(arrival_order(pods, nodes.gpu_capacity_milli, args.seed, args.inflation))
    results: list[ReplayResult] = []
    with tqdm(total=total * len(policies), unit="task", file=sys.stderr, desc="replay") as bar:
        for name in policies:
            bar.set_postfix_str(name)
            results.append(replay(nodes, pods, name, args.seed, inflation=args.inflation, progress=bar.update))
    args.out.mkdir(parents=True, exist_ok=True)
    curve = args.out / "curve.json"
    curve.write_text(
        json.dumps(
            {
                "nodes": str(args.nodes),
                "pods": str(args.pods),
                "seed": args.seed,
                "gpu_capacity_milli": nodes.gpu_capacity_milli,
                "runs": [r.to_json() for r in results],
            },
            indent=1,
        )
    )
    png = plot_curves(results, args.out / "curve.png", title=f"{Path(args.pods).stem}, seed {args.seed}")
    summary = [
        {
            "policy": r.policy,
            "seed": r.seed,
            "unallocated_gpu_pct": round(r.unallocated_gpu_pct, 3),
            "placed": r.placed,
            "failed": r.failed,
            "wall_s": round(r.wall_s, 2),
        }
        for r in results
    ]
    if args.json:
        emit_json({"results": summary, "curve_json": str(curve), "plot": str(png)})
    else:
        print_table(
            ["POLICY", "SEED", "UNALLOCATED GPU %", "PLACED", "FAILED", "WALL S"],
            [
                [s["policy"], s["seed"], f"{s['unallocated_gpu_pct']:.2f}", s["placed"], s["failed"], s["wall_s"]]
                for s in summary
            ],
        )
        print(f"curve: {curve}\nplot:  {png}")
    return 0
