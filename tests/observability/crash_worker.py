"""A managing process that allocates and releases on a SQLite ledger as fast as it can, until it is killed
(driven by test_crash)."""

from __future__ import annotations

import contextlib
import random
import sys

import hami_devices as hd
from hami_devices.allocation import evict
from hami_devices.ledger import SqliteLedger
from tests.observability.helpers import simulated, t4_node


def main() -> None:
    ledger = SqliteLedger(sys.argv[1])
    rng = random.Random(int(sys.argv[2]))
    devices = simulated(ledger, t4_node(2, split=64))
    print("ready", flush=True)
    n = 0
    while True:
        with ledger.reading() as view:
            live = view.handle_ids()
        roll = rng.random()
        if live and roll < 0.35:
            hd.release(live[rng.randrange(len(live))], ledger=ledger)
        elif live and roll < 0.45:
            evict(ledger, live[rng.randrange(len(live))], reclaimer="queue/gold", reason="crash test")
        else:
            with contextlib.suppress(hd.InsufficientResources):
                hd.allocate(devices, {"parts": [{"memory_mib": rng.randint(256, 4096), "cores": 5}]},
                            metadata={"pod": f"pod-{n}", "namespace": "crash"})
        n += 1


if __name__ == "__main__":
    main()
