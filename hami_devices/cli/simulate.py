"""``hami-devices simulate``: replay an openb trace with one or more placement policies."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from hami_devices.cli.output import emit_json, print_table
from hami_devices.errors import InvalidRequest
from hami_devices.scheduling.policies import BUILTIN, load_policies, resolve_policy
from hami_devices.simulate.protocol import DEFAULT_INFLATION, arrival_order
from hami_devices.simulate.sample import NODE_FILE, SAMPLE_DIR, pod_file
from hami_devices.simulate.trace import load_nodes, load_pods

if TYPE_CHECKING:
    from hami_devices.research.replay import ReplayResult


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay a GPU-sharing trace (Alibaba openb) through the scoring engine",
        description="Places every task with the scoring engine and the named policy, exactly as schedule and "
        "hd.allocate do. Follows the protocol of the openb README: sorted then seeded shuffle, inflation "
        "to 130% of GPU capacity, no departures; reports unallocated GPU % at arrived = 100%. "
        "Without --nodes and --pods it replays the sample shipped with the package (77 of the trace's "
        "1,213 nodes); the full trace is alibaba/clusterdata cluster-trace-gpu-v2023.",
    )
    parser.add_argument("--nodes", metavar="CSV", help="openb node list (default: the shipped sample's)")
    parser.add_argument("--pods", metavar="CSV", help="openb pod list (default: the shipped sample's, see --sample)")
    parser.add_argument(
        "--sample",
        default="default",
        metavar="VARIANT",
        help="without --nodes/--pods: the shipped openb sample's task list to replay (default, cpu050, cpu200, "
        "gpushare40, gpushare80, gpuspec10, gpuspec20, multigpu20, multigpu40)",
    )
    parser.add_argument(
        "--policy",
        action="append",
        dest="policies",
        metavar="P",
        help=f"engine policy (repeatable; built in: {', '.join(BUILTIN)}, or from --policies; "
        "default fragmentation-aware)",
    )
    parser.add_argument("--policies", dest="policies_file", metavar="FILE", help="YAML file of user policies")
    parser.add_argument(
        "--mix",
        choices=["online", "declared"],
        default="online",
        help="fragmentation-aware's workload mix: learned online from the arrivals (default), or declared "
        "as the typical shapes of the whole task list (FGD's target workload; reads the trace ahead)",
    )
    parser.add_argument("--seed", type=int, default=42, help="shuffle/inflation seed (default 42)")
    parser.add_argument("--inflation", type=float, default=DEFAULT_INFLATION, help="arrivals up to this x capacity")
    parser.add_argument("--out", metavar="DIR", type=Path, default=Path("."), help="where curve.json/curve.png go")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def _trace_files(args: argparse.Namespace) -> tuple[Path, Path]:
    if args.nodes and args.pods:
        return Path(args.nodes), Path(args.pods)
    if args.nodes or args.pods:
        raise InvalidRequest("--nodes" if args.pods else "--pods", "give both --nodes and --pods, or neither")
    pods = pod_file(SAMPLE_DIR, args.sample)
    if not pods.is_file():
        variants = sorted(p.stem.removeprefix("openb_pod_list_") for p in SAMPLE_DIR.glob("openb_pod_list_*.csv"))
        raise InvalidRequest("--sample", f"no variant {args.sample!r} in the sample; one of {', '.join(variants)}")
    return SAMPLE_DIR / NODE_FILE, pods


def run(args: argparse.Namespace) -> int:
    # the replay is research (hami_devices.research): loaded by the verb that runs it, never by the CLI's import
    from hami_devices.research.plot import plot_curves
    from hami_devices.research.replay import replay

    args.nodes, args.pods = _trace_files(args)
    nodes = load_nodes(args.nodes)
    pods = load_pods(args.pods)
    policies = args.policies or ["fragmentation-aware"]
    user = load_policies(args.policies_file) if args.policies_file else {}
    for name in policies:
        resolve_policy(name, user)  # an unknown name fails here, before any replay
    total = len(arrival_order(pods, nodes.gpu_capacity_milli, args.seed, args.inflation))
    results: list[ReplayResult] = []
    with tqdm(total=total * len(policies), unit="task", file=sys.stderr, desc="replay") as bar:
        for name in policies:
            bar.set_postfix_str(name)
            results.append(
                replay(
                    nodes,
                    pods,
                    name,
                    args.seed,
                    mix=args.mix,
                    inflation=args.inflation,
                    progress=bar.update,
                    user_policies=user,
                )
            )
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
    if png is None:
        print("hami-devices: no curve.png: matplotlib is not installed (pip install 'hami-devices[plot]')",
              file=sys.stderr)
    summary = [r.summary() for r in results]
    if args.json:
        emit_json({"results": summary, "curve_json": str(curve), "plot": str(png)})
    else:
        print_table(
            ["POLICY", "MIX", "SEED", "UNALLOCATED GPU %", "PLACED", "FAILED", "P50 MS", "WALL S"],
            [
                [
                    s["policy"],
                    s["mix"],
                    s["seed"],
                    f"{s['unallocated_gpu_pct']:.2f}",
                    s["placed"],
                    s["failed"],
                    s["decision_p50_ms"],
                    s["wall_s"],
                ]
                for s in summary
            ],
        )
        print(f"curve: {curve}\nplot:  {png}")
    return 0
