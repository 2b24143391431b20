"""``hami-devices defrag``: fragmentation now (``status``), the moves a round would make (``plan``), and
making them through the one placement path (``apply``; a dry run by default on a live ledger)."""

from __future__ import annotations

import argparse
from typing import Any

from hami_devices.cli.common import add_json, add_source, found_from, ledger_from, report_missing
from hami_devices.cli.defrag_apply import apply_moves
from hami_devices.cli.output import emit_json, print_table
from hami_devices.device import Device
from hami_devices.errors import InvalidRequest
from hami_devices.ledger import Ledger
from hami_devices.scheduling import mix as mixes
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.defrag.budget import MoveBudget
from hami_devices.scheduling.defrag.report import NodeFragmentation, Plan, node_status, plan_moves
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.fragmentation import held_mix

ABOUT = (
    "Two rates, each over the idle (unallocated) share of healthy devices: FGD's is the share the workload mix "
    "cannot use (the mix the ledger learned, else that of what it holds); the operators' is the share on partly "
    "used devices.  A rate can rise while unallocated capacity rises too: it is a share of what is free."
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("defrag", help="fragmentation now, and the moves that lower it",
                                   description=ABOUT)
    actions = parser.add_subparsers(dest="defrag_action", metavar="ACTION", required=True)
    status = actions.add_parser("status", help="both fragmentation rates and the partly used devices, per node",
                                description=ABOUT)
    _common(status)
    status.set_defaults(func=run_status)
    plan = actions.add_parser("plan", help="the moves the solver chooses within the budget, with what each gains")
    _common(plan)
    _planning(plan)
    plan.set_defaults(func=run_plan)
    apply = actions.add_parser(
        "apply", help="make the planned moves: release and allocate again on the planned device, with events",
        description="Each move releases the allocation and grants it again, under the same id, on the device "
        "the plan chose, through hd.allocate; an allocation whose processes run is left where it is. "
        "A dry run (the plan only) unless --no-dry-run: the default on a live ledger (no --inventory).",
    )
    _common(apply)
    _planning(apply)
    apply.add_argument("--dry-run", action=argparse.BooleanOptionalAction, default=None,
                       help="show the moves without making them (default: on, except with --inventory)")
    apply.set_defaults(func=run_apply)


def _common(parser: argparse.ArgumentParser) -> None:
    add_source(parser, ledger=True)
    add_json(parser)


def _planning(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-moves", type=int, metavar="N",
                        help="moves at most (default: the hourly budget, --share-per-hour of the running tasks)")
    parser.add_argument("--share-per-hour", type=float, default=0.05, metavar="F",
                        help="moves per hour as a share of the running tasks (default: %(default)s)")
    parser.add_argument("--solver", choices=["milp", "greedy"], default="greedy",
                        help="milp: HiGHS (the [solver] extra) within --time-limit; greedy (default)")
    parser.add_argument("--time-limit", type=float, default=1.0, metavar="S", help="the solver's (default: 1)")


def _cluster(args: argparse.Namespace, ledger: Ledger) -> tuple[list[Device], ClusterState, WorkloadMix, int]:
    found = found_from(args, ledger)
    missing = report_missing(found)
    with ledger.reading() as view:
        handles = view.handles()
        learned = mixes.load_from(view)
    cluster = ClusterState.from_devices(found.devices, handles)
    return found.devices, cluster, learned.mix if learned is not None else held_mix(cluster), missing


def run_status(args: argparse.Namespace) -> int:
    ledger = ledger_from(args)
    try:
        _, cluster, mix, missing = _cluster(args, ledger)
    finally:
        ledger.close()
    whole, nodes = node_status(cluster, mix)
    if args.json:
        emit_json({"cluster": whole.to_dict(), "nodes": [n.to_dict() for n in nodes]})
        return missing
    print_table(
        ["NODE", "DEVICES", "PARTLY_USED", "PARTLY_USED%", "UNALLOCATED%", "FGD_FRAG%", "OPERATOR_FRAG%"],
        [_row(n) for n in [*nodes, whole]],
    )
    return missing


def _row(n: NodeFragmentation) -> list[object]:
    return [n.node, n.devices, n.partly_used, _pct(n.partly_used_share), _pct(n.unallocated), _pct(n.fgd),
            _pct(n.operator)]


def _pct(share: float) -> str:
    return f"{100 * share:.2f}"


def _plan(args: argparse.Namespace, ledger: Ledger) -> tuple[list[Device], Plan, int]:
    if args.max_moves is not None and args.max_moves < 0:
        raise InvalidRequest("--max-moves", "must be 0 or more")
    devices, cluster, mix, missing = _cluster(args, ledger)
    allowed = args.max_moves
    if allowed is None:
        allowed = MoveBudget(args.share_per_hour).allowed(0.0, len(cluster.bookings))
    plan = plan_moves(cluster, mix, allowed, solver=args.solver, time_limit_s=args.time_limit)
    return devices, plan, missing


def show_plan(plan: Plan, *, as_json: bool, extra: dict[str, object] | None = None) -> None:
    if as_json:
        emit_json({
            "budget": plan.allowed, "method": plan.method, "before": plan.before.to_dict(),
            "after": plan.after.to_dict(), "moves": [m.to_dict() for m in plan.moves], **(extra or {}),
        })
        return
    print(f"budget {plan.allowed} moves, solver {plan.method}: FGD fragmentation {_pct(plan.before.fgd)}% -> "
          f"{_pct(plan.after.fgd)}%, operators' {_pct(plan.before.operator)}% -> {_pct(plan.after.operator)}%")
    if not plan.moves:
        print("no move lowers fragmentation within the budget (only preemptible allocations are moved)")
        return
    print_table(
        ["ALLOCATION", "FROM", "TO", "FREED", "COST", "FGD_GAIN_PTS"],
        [[m.allocation_id, f"{m.from_node}/{','.join(m.from_uuids)}", f"{m.to_node}/{','.join(m.to_uuids)}",
          m.freed, m.cost, m.fgd_points] for m in plan.moves],
    )


def run_plan(args: argparse.Namespace) -> int:
    ledger = ledger_from(args)
    try:
        _, plan, missing = _plan(args, ledger)
    finally:
        ledger.close()
    show_plan(plan, as_json=args.json)
    return missing


def run_apply(args: argparse.Namespace) -> int:
    dry = args.dry_run if args.dry_run is not None else args.inventory is None
    ledger = ledger_from(args)
    try:
        devices, plan, missing = _plan(args, ledger)
        if dry:
            show_plan(plan, as_json=args.json, extra={"dry_run": True})
            if not args.json:
                print("dry run: nothing was moved (--no-dry-run makes the moves)")
            return missing
        outcome = apply_moves(devices, ledger, plan.moved)
    finally:
        ledger.close()
    show_plan(plan, as_json=args.json, extra={"dry_run": False, **outcome.to_dict()})
    if not args.json:
        print(f"moved {len(outcome.moved)} of {len(plan.moved)}"
              + "".join(f"\n  left {a}: {why}" for a, why in sorted(outcome.left.items())))
    return missing or (1 if outcome.left else 0)
