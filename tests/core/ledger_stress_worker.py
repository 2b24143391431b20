"""One scheduler process for test_ledger_concurrency: threads that place, commit and release on one ledger.

``python ledger_stress_worker.py LEDGER SEED THREADS`` (LEDGER: a SQLite file or a database URL).  Each
thread draws requests from its own random stream and commits each one either directly
(``hd.allocate(devices, request)``) or decide-first: placed by an engine of its own whose view of the ledger
it refreshes only now and then (so it is often stale), then committed as that placement.  It releases one
of its live allocations now and then.  Every commit and release is printed (``granted ID`` /
``released ID``) only after the ledger committed it, so whatever the parent reads was durable before the
line was written, and ``releasing ID`` before a release starts; the parent SIGKILLs the process at any
moment.
"""

from __future__ import annotations

import random
import sys
import threading

import hami_devices as hd
from hami_devices.assembly import build_engine
from hami_devices.config import parse_config
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import Ledger
from hami_devices.ledger.opening import ledger_target, open_ledger
from hami_devices.models import DeviceHandle, ResourceRequest

NODE_CPU = 8_000
NODE_MEMORY = 32_768
SPLIT = 6
INVENTORY = {
    "nodes": [
        {
            "name": f"n{i}",
            "cpu_milli": NODE_CPU,
            "memory_mib": NODE_MEMORY,
            "devices": [{"vendor": "nvidia", "model": "T4", "count": 2, "split_count": SPLIT}],
        }
        for i in range(3)
    ]
}
CONFIG = parse_config({"device-plugin": {"isolation-level": "none"}})
_PRINT = threading.Lock()


def say(line: str) -> None:
    with _PRINT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def draw(rng: random.Random) -> ResourceRequest:
    host = {"host_cpu_milli": rng.choice([0, 500, 1_500, 3_000]), "host_memory_mib": rng.choice([0, 2_048, 8_192])}
    if rng.random() < 0.2:  # a host-only request
        return ResourceRequest(parts=[], host_cpu_milli=host["host_cpu_milli"] or 1_000,
                               host_memory_mib=host["host_memory_mib"])
    return ResourceRequest.single(memory_mib=rng.choice([1_000, 2_500, 4_000, 7_000]),
                                  cores=rng.choice([0, 10, 25, 50]), **host)


def run(seed: int, devices: list[hd.Device], ledger: Ledger) -> None:
    try:
        churn(seed, devices, ledger)
    except Exception as exc:  # the parent fails the test on any such line
        say(f"error {type(exc).__name__}: {exc}")
        raise


def churn(seed: int, devices: list[hd.Device], ledger: Ledger) -> None:
    rng = random.Random(seed)
    engine = build_engine(parse_inventory(INVENTORY), CONFIG, ledger=ledger)
    mine: list[DeviceHandle] = []
    while True:
        if mine and rng.random() < 0.35:
            handle = mine.pop(rng.randrange(len(mine)))
            say(f"releasing {handle.id}")  # a kill between the release and the next line leaves it unsaid
            hd.release(handle)
            say(f"released {handle.id}")
            continue
        request = draw(rng)
        try:
            if rng.random() < 0.5:
                handle = hd.allocate(devices, request)
            else:
                if rng.random() < 0.3:
                    engine.cluster.sync(ledger.handles())  # otherwise the view stays as stale as it is
                handle = hd.allocate(devices, engine.place(request))
        except hd.InsufficientResources:
            continue
        mine.append(handle)
        say(f"granted {handle.id}")


def main() -> None:
    path, seed, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ledger = open_ledger(ledger_target(path))
    devices = hd.discover(parse_inventory(INVENTORY), config=CONFIG, ledger=ledger)
    workers = [threading.Thread(target=run, args=(seed * 100 + i, devices, ledger), daemon=True)
               for i in range(threads)]
    for worker in workers:
        worker.start()
    say("ready")
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    main()
