"""A reference batch scheduler on hami-devices: one engine, a stream of jobs, a restart after SIGKILL.

    python scheduler.py --ledger /tmp/batch/ledger.db [--jobs 60] [--kill-after 15]

Jobs arrive one per tick and run a few ticks.  Every decision and commit goes through one engine built
with the ledger (``engine.allocate`` / ``engine.release``); each job's allocation id is its name, so the
ledger alone says which jobs started and which finished.  The node hand-off is ``prepare`` / ``unprepare``
of ``hami_devices.scheduler`` (``hami-devices prepare`` / ``unprepare`` in a prolog and an epilog on a real node).

With ``--kill-after K`` the stream runs in a child process that is SIGKILLed once it has started K jobs;
the scheduler then restarts from the ledger and finishes the stream.  It prints one JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import hami_devices as hd
from hami_devices.scheduler import prepare, unprepare

HERE = Path(__file__).resolve().parent
SHAPES = [  # (weight, request): shares, whole cards, a two-card job, and one no node can hold
    (6, {"task_type": "inference", "parts": [{"memory_mib": 4096, "cores": 25}]}),
    (3, {"task_type": "training", "parts": [{"cores": 100, "models": ["A100-80GB"]}]}),
    (2, {"task_type": "training", "parts": [{"count": 2, "cores": 100}]}),
    (1, {"task_type": "batch", "parts": [{"count": 9, "cores": 100}]}),
]


@dataclass(frozen=True)
class Job:
    name: str
    arrival: int
    duration: int
    request: dict


def job_stream(count: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    weights = [w for w, _ in SHAPES]
    return [Job(f"job-{i:04d}", i, rng.randint(2, 8), rng.choices([r for _, r in SHAPES], weights)[0])
            for i in range(count)]


class BatchScheduler:
    def __init__(self, inventory: Path, ledger_path: Path, jobs: list[Job], *, tell: bool = False) -> None:
        self.tell = tell  # say each start on stdout (what the parent of a child to be killed counts)
        self.ledger = hd.SqliteLedger(ledger_path)
        self.engine = hd.build_engine(inventory, ledger=self.ledger)  # books what the ledger holds: a restart
        self.jobs = {j.name: j for j in jobs}
        live = {h.id: h for h in self.ledger.handles()}
        granted = {e.allocation_id for e in self.ledger.events(kinds=["allocation.granted"])}
        self.running = {i: int(h.metadata["ends"]) for i, h in live.items()}
        self.done = granted - set(live)
        self.refused: set[str] = set()
        started = [self.jobs[i].arrival for i in granted]
        self.now = max(started, default=-1)
        self.waiting = [j.name for j in jobs if j.arrival <= self.now and j.name not in granted]
        for handle in live.values():  # the hand-off is idempotent: a kill between commit and prepare is fine
            prepare(handle.id, self.ledger, node=handle.grants[0].node if handle.grants else handle.host)

    def tick(self) -> None:
        for name, ends in sorted(self.running.items()):
            if ends <= self.now:
                self.depart(name)
        arrived = [j.name for j in self.jobs.values() if j.arrival == self.now]
        queue, self.waiting = self.waiting + arrived, []
        for name in queue:  # first come first served, with backfill: a job that does not fit waits
            if not self.start(name):
                self.waiting.append(name)

    def start(self, name: str) -> bool:
        job = self.jobs[name]
        ends = self.now + job.duration
        try:
            handle = self.engine.allocate(job.request, handle_id=name, metadata={"job": name, "ends": str(ends)})
        except hd.InsufficientResources as refusal:
            if refusal.permanent:  # no node of this cluster could ever hold it: say so, never retry
                self.refused.add(name)
                return True
            return False
        self.running[name] = ends
        for group in handle.groups:
            prepare(handle.id, self.ledger, node=group[0])  # on a real node: the prolog's `hami-devices prepare`
        if self.tell:
            print(f"started {name}", flush=True)
        return True

    def depart(self, name: str) -> None:
        handle = self.ledger.get(name)
        for node in {g.node for g in handle.grants}:
            unprepare(name, node=node)  # on a real node: the epilog's `hami-devices unprepare`
        self.engine.release(name)
        del self.running[name]
        self.done.add(name)

    def run(self) -> None:
        last = max(j.arrival for j in self.jobs.values())
        while self.now < last or self.running or (self.waiting and self.now < last + 100):
            self.now += 1
            self.tick()

    def summary(self, restarted: bool) -> dict[str, object]:
        booked = set(self.engine.cluster.bookings)
        return {
            "jobs": len(self.jobs), "finished": len(self.done), "refused": sorted(self.refused),
            "waiting": self.waiting, "restarted": restarted, "ledger_allocations": len(self.ledger.handles()),
            "engine_bookings": len(booked), "granted_once": granted_once(self.ledger, self.done),
        }


def granted_once(ledger: hd.Ledger, done: set[str]) -> bool:
    granted = [e.allocation_id for e in ledger.events(kinds=["allocation.granted"])]
    return len(granted) == len(set(granted)) == len(done)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", type=Path, default=HERE / "cluster.yaml")
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--kill-after", type=int, default=0, help="SIGKILL the scheduler after K started jobs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    jobs = job_stream(args.jobs, args.seed)
    restarted = False
    if args.kill_after and not args.child:
        command = [sys.executable, __file__, "--child", "--ledger", str(args.ledger), "--jobs", str(args.jobs),
                   "--seed", str(args.seed), "--inventory", str(args.inventory)]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        started = 0
        for line in child.stdout:
            started += line.startswith("started ")
            if started >= args.kill_after:
                os.kill(child.pid, signal.SIGKILL)  # no chance to tidy up: the ledger is all that is left
                break
        child.wait()
        restarted = child.returncode == -signal.SIGKILL
    scheduler = BatchScheduler(args.inventory, args.ledger, jobs, tell=args.child)
    scheduler.run()
    if not args.child:
        print(json.dumps(scheduler.summary(restarted)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
