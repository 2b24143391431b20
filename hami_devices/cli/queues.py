"""``hami-devices queues``: check a queue file, and replay a timed workload through the admission loop."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.cli.output import emit_json, print_table
from hami_devices.config import load_config
from hami_devices.queueing.events import Event, EventKind
from hami_devices.queueing.loop import AdmissionLoop
from hami_devices.queueing.replay import CORES, replay
from hami_devices.queueing.spec import load_queues, queues_schema
from hami_devices.queueing.workload import load_timed_workload
from hami_devices.scheduling.policies import BUILTIN


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "queues",
        help="queues with guarantees, borrowing and reclaim",
        description="Queues with guaranteed and shared capacity (see hami_devices.queueing).",
    )
    verbs = parser.add_subparsers(dest="queues_verb", metavar="ACTION", required=True)

    check = verbs.add_parser("check", help="validate a queue file (against an inventory, if given) and show the tree")
    check.add_argument("--queues", required=True, metavar="FILE", help="queue file YAML")
    check.add_argument("--inventory", metavar="FILE", help="cluster inventory YAML (checks @scopes, shows capacity)")
    check.add_argument("--config", metavar="FILE", help="configuration YAML")
    check.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    check.set_defaults(func=run_check)

    schema = verbs.add_parser("schema", help="print the JSON Schema of the queue file")
    schema.set_defaults(func=run_schema)

    sim = verbs.add_parser(
        "simulate",
        help="replay a timed workload through the admission loop",
        description="Replays the workload in simulated time: tasks arrive, run their duration and leave; the loop "
        "ticks every --tick seconds, admitting, evicting and explaining.  Evictions happen only when the "
        "configuration's scheduler.resource-allocation.enable-preemptive is true (or --preemptive).",
    )
    sim.add_argument("--inventory", required=True, metavar="FILE", help="cluster inventory YAML")
    sim.add_argument("--queues", required=True, metavar="FILE", help="queue file YAML")
    sim.add_argument("--workload", required=True, metavar="FILE", help="timed workload YAML (arrival, duration)")
    sim.add_argument("--config", metavar="FILE", help="configuration YAML (policy, enable-preemptive, ...)")
    sim.add_argument("--policy", help=f"placement policy (built in: {', '.join(BUILTIN)}); default: the configured one")
    sim.add_argument("--policies", metavar="FILE", help="YAML file of user policies")
    preempt = sim.add_mutually_exclusive_group()
    preempt.add_argument("--preemptive", dest="preemptive", action="store_const", const=True, help="allow evictions")
    preempt.add_argument("--no-preemptive", dest="preemptive", action="store_const", const=False, help="never evict")
    sim.add_argument("--tick", type=float, default=10.0, metavar="S", help="seconds between scheduling ticks (10)")
    sim.add_argument(
        "--until", type=float, metavar="S", help="stop at this time (default: a tick after the last arrival)"
    )
    sim.add_argument("--events", action="store_true", help="print every event, not only evictions")
    sim.add_argument("--plot", metavar="FILE", help="write a PNG of each queue's usage against its guarantee over time")
    sim.add_argument("--json", action="store_true", help="print JSON for scripts instead of tables")
    sim.set_defaults(func=run_simulate)


def _amounts(amounts: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in amounts.items()) or "-"


def run_schema(args: argparse.Namespace) -> int:
    emit_json(queues_schema())
    return 0


def run_check(args: argparse.Namespace) -> int:
    """The tree, and with ``--inventory`` the guarantees the cluster cannot honour (exit status 1)."""
    spec = load_queues(args.queues)
    if args.config and not args.inventory:
        load_config(args.config)  # a configuration given is checked, even where no inventory needs it
    capacity: dict[str, float] = {}
    short: list[dict[str, Any]] = []
    if args.inventory:
        loop = AdmissionLoop.from_config(args.inventory, spec, args.config)
        capacity = loop.resources.to_dict(loop.tree.capacity)
        short = [{"resource": k, "guaranteed": _num(g), "capacity": _num(c), "shortfall": _num(g - c)}
                 for k, g, c in loop.tree.unhonoured()]
    rows: list[dict[str, Any]] = []

    def walk(queue: Any, depth: int) -> None:
        rows.append(
            {
                "queue": queue.name,
                "depth": depth,
                "guarantee": queue.guarantee,
                "limit": queue.limit,
                "lending_limit": queue.lending_limit,
                "weight": queue.weight,
                "min_runtime_s": queue.min_runtime,
                "strict_fifo": queue.strict_fifo,
                "preemption": queue.preemption.model_dump(by_alias=True, exclude={"reclaim", "priority"}),
                "reclaimable": queue.reclaimable,
                "state": queue.state,
                "stop_policy": queue.stop_policy,
            }
        )
        for child in queue.children:
            walk(child, depth + 1)

    for top in spec.queues:
        walk(top, 0)
    if args.json:
        emit_json({"queues": rows, "capacity": capacity, "unhonoured": short, "valid": not short,
                   "classes": {k: v.model_dump() for k, v in spec.classes.items()},
                   "priority_classes": spec.priority_classes})
        return 1 if short else 0
    print_table(
        ["QUEUE", "GUARANTEE", "LIMIT", "WEIGHT", "MIN-RUNTIME", "EVICTS", "STATE"],
        [
            [
                "  " * r["depth"] + r["queue"],
                _amounts(r["guarantee"]),
                _amounts(r["limit"]),
                f"{r['weight']:g}",
                f"{r['min_runtime_s']:g}s",
                _evicts(r["preemption"]),
                _state(r),
            ]
            for r in rows
        ],
    )
    if capacity:
        print(f"\ncluster: {_amounts({k: int(v) if v != float('inf') else 'unbounded' for k, v in capacity.items()})}")
    for s in short:
        print(f"\n{s['resource']}: the top-level queues are guaranteed {s['guaranteed']}, the cluster holds "
              f"{s['capacity']}: {s['shortfall']} short")
    if short:
        print(f"\n{args.queues}: guarantees the cluster cannot honour ({len(short)} resource(s))")
        return 1
    print(f"\n{args.queues}: valid")
    return 0


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def _evicts(preemption: dict[str, Any]) -> str:
    out = []
    if preemption["reclaim-within-cohort"] != "never":
        out.append(f"reclaim:{preemption['reclaim-within-cohort']}")
    if preemption["within-queue"] != "never":
        out.append(f"within-queue:{preemption['within-queue']}")
    borrow = preemption["borrow-within-cohort"]
    if borrow["policy"] != "never":
        cap = borrow.get("max-priority-threshold")
        out.append("borrow:lower-priority" + ("" if cap is None else f"<={cap}"))
    if preemption["fair-share"]:
        out.append("fair-share")
    return ",".join(out) or "-"


def _state(row: dict[str, Any]) -> str:
    words = [row["state"]]
    if row["stop_policy"] != "none":
        words.append(row["stop_policy"])
    if not row["reclaimable"]:
        words.append("not-reclaimable")
    return ",".join(words)


def _eviction_line(e: Event) -> str:
    lost = float(e.data.get("lost_device_seconds", 0.0)) / 3600.0
    requeued = "requeued" if e.data.get("requeued") else "not requeued"
    whom = f" for {e.data.get('by_queue')}/{e.by}" if e.by else ""
    who = f"t={e.time:g}s {e.queue}/{e.task} evicted [{e.reason}]{whom}"
    return f"{who}: {e.detail} ({lost:.3f} device-hours lost, {requeued})"


def run_simulate(args: argparse.Namespace) -> int:
    if args.plot:  # before the replay, not after it
        from hami_devices.extras import require

        require("matplotlib", "hami-devices queues simulate --plot")
    options: dict[str, Any] = {"record_timings": True}
    if args.preemptive is not None:
        options["preemptive"] = args.preemptive
    loop = AdmissionLoop.from_config(
        args.inventory, args.queues, args.config, policy=args.policy, policies=args.policies, **options
    )
    workload = load_timed_workload(args.workload)
    log: list[Event] = []
    loop.subscribe(log.append)
    report = replay(loop, workload, tick=args.tick, horizon=args.until, progress=not args.json and len(workload) > 2000)
    capacity = float(loop.tree.capacity[CORES])
    if args.plot:
        from hami_devices.queueing.plot import plot_usage

        plot_usage(report, capacity, args.plot, title=f"{args.queues} on {args.inventory}")
    borrowing = sum(1 for e in log if e.kind == EventKind.ADMITTED and e.reason == "borrowing")
    if args.json:
        out = report.to_dict(series=True)
        out.update(
            policy=loop.engine.policy.name,
            preemptive=loop.preemptive,
            borrowing_admissions=borrowing,
            eviction_log=[e.to_dict() for e in report.evictions],
        )
        if args.events:
            out["events"] = [e.to_dict() for e in log]
        emit_json(out)
        return 0
    print(
        f"policy {loop.engine.policy.name}; evictions {'on' if loop.preemptive else 'off'}; tick {args.tick:g}s; "
        f"{len(workload)} tasks until t={report.horizon:g}s"
    )
    rows = []
    for name, g in report.groups.items():
        d = g.to_dict(report.horizon)
        rows.append(
            [
                name,
                _amounts(d["guarantee"]),
                d["submitted"],
                d["admitted"],
                d["waiting_at_end"],
                f"{d['wait_p50_s']:g}s",
                f"{d['wait_p99_s']:g}s",
                d["evictions"],
                f"{d['lost_device_hours']:g}",
                f"{100 * d['borrowed_share_mean']:.1f}%/{100 * d['borrowed_share_max']:.1f}%",
                d["guarantee_violations"],
            ]
        )
    print_table(
        [
            "QUEUE",
            "GUARANTEE",
            "SUBMITTED",
            "ADMITTED",
            "WAITING",
            "WAIT p50",
            "WAIT p99",
            "EVICTED",
            "LOST dev-h",
            "BORROWED mean/max",
            "VIOLATIONS",
        ],
        rows,
    )
    print(f"\ncluster utilisation (device-cores granted, time-weighted): {100 * report.utilisation:.1f}%")
    print(f"admissions that borrowed idle capacity: {borrowing}")
    if args.events:
        print("\nevents:")
        for e in log:
            print(f"  {e}")
    elif report.evictions:
        print("\nevictions:")
        for e in report.evictions:
            print(f"  {_eviction_line(e)}")
    waiting = loop.pending()
    if waiting:
        print("\nstill waiting at the end:")
        for t in waiting[:20]:
            print(f"  {loop.tree.nodes[t.queue].name}/{t.name}: {loop.why_waiting(t) or 'not yet considered'}")
        if len(waiting) > 20:
            print(f"  ... and {len(waiting) - 20} more")
    if args.plot:
        print(f"\nplot: {args.plot}")
    return 0
