"""Defragmentation measured on openb with departures (this project's timed protocol, see simulate/timed.py).

Replays each task list that has creation and deletion times in time order
through the engine (fragmentation-aware, online mix), on a sample of the
openb cluster with lifetimes stretched so the peak demand fills it, once
without defragmentation and once with ``defragment`` run every
``--every-min`` minutes of trace time on preemptible (qos BE) tasks.  Prints
one JSON object: per trace and run, the cluster fragmentation rate (FGD's
definition, for the trace's typical shapes) averaged over the busy samples
and at the last arrival, the unallocated GPU % at the last arrival, the
tasks that could not be placed and their GPU share, the moves made, and the
wall time; and the change defragmentation made.

    python bench/defrag.py [--traces DIR] [--only default ...] [--every-min 240] [--max-moves 20]
                           [--stretch 100] [--scale 0.12] [--seed 42] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from multiprocessing import Pool
from pathlib import Path

from tqdm import tqdm

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hami_devices.simulate.sample import NODE_FILE, trace_folder  # noqa: E402
from hami_devices.simulate.timed import DEFAULT_SCALE, DEFAULT_STRETCH, replay_timed  # noqa: E402
from hami_devices.simulate.trace import load_nodes, load_pods  # noqa: E402

SEED_ARTICLE = "fragmentation fell from 42 % to 18 % with active recovery (the claim this bench checks against)"


def _one(job: tuple[str, str, str, int, float | None, int, float, float]) -> dict[str, object]:
    nodes_csv, pods_csv, policy, seed, every_s, max_moves, stretch, scale = job
    result = replay_timed(
        load_nodes(nodes_csv),
        load_pods(pods_csv),
        policy,
        seed,
        stretch=stretch,
        scale=scale,
        defrag_every_s=every_s,
        max_moves=max_moves,
        sample_every_s=3600.0,
    )
    return {"trace": Path(pods_csv).stem.removeprefix("openb_pod_list_"), **result.summary()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "openb")
    parser.add_argument("--only", action="append", metavar="TRACE", help="only these traces (default: default)")
    parser.add_argument("--policy", default="fragmentation-aware")
    parser.add_argument("--every-min", type=float, default=240.0, help="minutes of trace time between rounds")
    parser.add_argument("--max-moves", type=int, default=20, help="moves per round at most")
    parser.add_argument("--stretch", type=float, default=DEFAULT_STRETCH)
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    folder, sample = trace_folder(args.traces)
    nodes_csv = str(folder / NODE_FILE)
    names = args.only or ["default"]
    traces = [folder / f"openb_pod_list_{n}.csv" for n in names]
    jobs = [
        (nodes_csv, str(t), args.policy, args.seed, every, args.max_moves, args.stretch, args.scale)
        for t in traces
        for every in (None, 60.0 * args.every_min)
    ]
    started = time.perf_counter()
    with Pool(max(1, args.jobs)) as pool:
        replays = pool.imap(_one, jobs, chunksize=1)  # in job order, as map would give them
        rows = list(tqdm(replays, total=len(jobs), desc="replays", unit="run", file=sys.stderr, disable=None))
    out: dict[str, dict[str, object]] = {}
    for name in names:
        plain = next(r for r in rows if r["trace"] == name and r["defrag_every_s"] is None)
        defrag = next(r for r in rows if r["trace"] == name and r["defrag_every_s"] is not None)
        out[name] = {
            "without_defrag": plain,
            "with_defrag": defrag,
            "change": {
                key: round(float(defrag[key]) - float(plain[key]), 2)  # type: ignore[arg-type]
                for key in (
                    "fragmentation_rate_mean_pct",
                    "fragmentation_rate_at_last_arrival_pct",
                    "unallocated_gpu_pct_at_last_arrival",
                    "failed_gpu_share_pct",
                )
            },
        }
    print(
        json.dumps(
            {
                "protocol": "timed replay with departures (simulate/timed.py): this project's, not the FGD paper's",
                "seed_article": SEED_ARTICLE,
                "data": {"folder": str(folder), "sample": sample},
                "runs": out,
                "total_wall_s": round(time.perf_counter() - started, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
