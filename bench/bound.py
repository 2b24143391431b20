"""How far from the limit: per openb trace, a lower bound on unallocated GPU %, a feasible offline packing, ours.

For each ``openb_pod_list_*.csv`` under ``--traces`` (the layout ``bench/placement.py`` reads; the
shipped sample, with a note, when the folder has no trace) and each seed of ``--bound-seeds``, the
tasks that had arrived when the metric is read (same order, inflation and stopping rule) are packed
offline (``hami_devices.research.bound``, the ``[research]`` extra):

* ``bound``: no placement of those tasks, even one that knows them all, leaves less GPU share
  unallocated (a configuration LP by column generation, certified by Lagrangian duality);
* ``admission_bound`` (with ``--admission``): the same for schedulers that must place every task that fits
  when it arrives, as the protocol's do (``research.bound.admission``; a dozen LPs a seed);
* ``offline``: a placement that does (the LP's patterns made whole, rounded by a MIP, topped up best-fit),
  held to the trace by an independent checker.

``online`` is the engine's fragmentation-aware policy with the mix learned online, run exactly as
``bench/placement.py`` runs it (its replay job, seeds ``--seeds``), and
``gap_closed = (fgd_published - online) / (fgd_published - bound)``.  Prints one JSON object.

    python bench/bound.py [--traces DIR] [--only TRACE ...] [--seeds 42-51] [--bound-seeds 42] [--jobs 1]
                          [--admission] [--skip-online]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from tqdm import tqdm

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from placement import HEADLINE, PUBLISHED, _one, _seeds  # noqa: E402

from hami_devices.research.bound.admission import admission_bound  # noqa: E402
from hami_devices.research.bound.check import granted_milli  # noqa: E402
from hami_devices.research.bound.configlp import config_bound  # noqa: E402
from hami_devices.research.bound.instance import instance_for  # noqa: E402
from hami_devices.research.bound.packing import offline_packing  # noqa: E402
from hami_devices.simulate.sample import NODE_FILE, trace_folder  # noqa: E402
from hami_devices.simulate.trace import load_nodes, load_pods  # noqa: E402

Job = tuple[str, str, str, int, bool]  # kind ("online" or "bound"), nodes csv, pods csv, seed, admission bound too


def _trace_name(pods_csv: str) -> str:
    return Path(pods_csv).stem.removeprefix("openb_pod_list_")


def _bound(nodes_csv: str, pods_csv: str, seed: int, admission: bool) -> dict[str, object]:
    nodes, pods = load_nodes(nodes_csv), load_pods(pods_csv)
    instance = instance_for(nodes, pods, seed)
    bound = config_bound(instance)
    packing = offline_packing(bound)
    checked = granted_milli(nodes, pods, list(instance.pods), packing.placed)  # raises on any breach
    if checked != packing.allocated_milli:
        raise RuntimeError(f"{pods_csv} seed {seed}: the packing claims {packing.allocated_milli}, grants {checked}")
    extra: dict[str, object] = {}
    if admission:
        ruled = admission_bound(instance, plain_milli=bound.upper_milli)
        extra = {"admission_bound": ruled.bound_pct, "admission_solve_s": ruled.solve_s}
    return {
        "seed": seed,
        "bound": bound.bound_pct,
        **extra,
        "offline": instance.unallocated_pct(checked),
        "lp_rounds": bound.rounds,
        "bound_solve_s": bound.solve_s,
        "offline_solve_s": packing.solve_s,
        "task_classes": len(instance.classes),
        "node_types": len(instance.types),
    }


def _quiet_worker() -> None:
    """The JSON is the parent's stdout alone: HiGHS prints a banner on a worker's file descriptor 1."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _job(job: Job) -> dict[str, object]:
    kind, nodes_csv, pods_csv, seed, admission = job
    if kind == "online":
        policy, mix = HEADLINE.split(":")
        return {"kind": kind, **_one((nodes_csv, pods_csv, policy, mix, seed))}
    return {"kind": kind, "trace": _trace_name(pods_csv), **_bound(nodes_csv, pods_csv, seed, admission)}


def _mean(rows: list[dict[str, object]], key: str) -> float:
    return float(np.mean([float(r[key]) for r in rows]))  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "openb")
    parser.add_argument("--only", action="append", metavar="TRACE", help="only these traces (e.g. default)")
    parser.add_argument("--seeds", default="42-51", help="seeds of the online replays")
    parser.add_argument("--bound-seeds", default="42", help="seeds whose arrivals are bounded and packed offline")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--skip-online", action="store_true", help="the bound and the offline packing only")
    parser.add_argument("--admission", action="store_true", help="also the bound under the admission rule")
    args = parser.parse_args()
    folder, sample = trace_folder(args.traces)
    nodes_csv = str(folder / NODE_FILE)
    traces = sorted(folder.glob("openb_pod_list_*.csv"))
    if args.only:
        traces = [t for t in traces if _trace_name(str(t)) in args.only]
    bound_seeds = _seeds(args.bound_seeds)
    jobs: list[Job] = [("bound", nodes_csv, str(t), s, args.admission) for t in traces for s in bound_seeds]
    if not args.skip_online:
        jobs += [("online", nodes_csv, str(t), s, False) for t in traces for s in _seeds(args.seeds)]
    started = time.perf_counter()
    with Pool(max(1, args.jobs), initializer=_quiet_worker) as pool:
        done = pool.imap(_job, jobs, chunksize=1)
        rows = list(tqdm(done, total=len(jobs), desc="bound + replays", unit="job", file=sys.stderr, disable=None))
    out: dict[str, dict[str, object]] = {}
    for trace in sorted({_trace_name(str(t)) for t in traces}):
        bounds = [r for r in rows if r["kind"] == "bound" and r["trace"] == trace]
        online = [r for r in rows if r["kind"] == "online" and r["trace"] == trace]
        entry: dict[str, object] = {
            "bound": round(_mean(bounds, "bound"), 3),
            "offline": round(_mean(bounds, "offline"), 3),
            **({"admission_bound": round(_mean(bounds, "admission_bound"), 3)} if args.admission else {}),
            "bound_solve_s": round(_mean(bounds, "bound_solve_s"), 1),
            "offline_solve_s": round(_mean(bounds, "offline_solve_s"), 1),
            "bound_seeds": [r["seed"] for r in bounds],
            "online_seeds": len(online),
            "per_seed": [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items() if k not in ("kind",
                          "trace")} for r in bounds],
        }
        if online:
            entry["online"] = round(_mean(online, "unallocated"), 3)
            entry["online_std"] = round(float(np.std([float(r["unallocated"]) for r in online])), 3)  # type: ignore[arg-type]
        published = PUBLISHED.get(trace, {}).get("FGD")
        if published is not None and not sample:
            entry["fgd_published"] = published
            span = published - float(entry["bound"])  # type: ignore[arg-type]
            if online:
                closed = (published - float(entry["online"])) / span if span > 0 else None  # type: ignore[arg-type]
                entry["gap_closed"] = round(closed, 3) if closed is not None else None
        out[trace] = entry
    print(json.dumps({"data": {"folder": str(folder), "sample": sample}, "online_run": HEADLINE, "traces": out,
                      "total_wall_s": round(time.perf_counter() - started, 1)}, indent=1))


if __name__ == "__main__":
    main()
