"""A separate OS process that allocates from a shared SQLite ledger (driven by test_sqlite_ledger)."""

from __future__ import annotations

import sys
import time

from hami_devices import InsufficientResources, allocate, discover
from hami_devices.config import parse_config
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import SqliteLedger

INVENTORY = {
    "nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "T4", "count": 2, "split_count": 64}]}]
}


def main() -> None:
    ledger_path, attempts, memory, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    config = parse_config({"device-plugin": {"isolation-level": "none"}})
    ledger = SqliteLedger(ledger_path)
    devices = discover(parse_inventory(INVENTORY), ledger=ledger, config=config)
    print("ready", flush=True)
    for _ in range(attempts):
        try:
            handle = allocate(devices, {"parts": [{"memory_mib": memory}]})
        except InsufficientResources:
            print("refused", flush=True)
        else:
            print(f"granted {handle.id}", flush=True)
        time.sleep(pause)


if __name__ == "__main__":
    main()
