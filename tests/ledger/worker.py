"""A separate OS process on a ledger named by its ``--ledger`` value (a file or a URL), for test_contract.

    worker.py hold TARGET                      open a write transaction, add a row, print "holding", sleep
    worker.py allocate TARGET ATTEMPTS MIB     print {"capacity": {uuid: MiB}}, then "granted ID" / "refused"
"""

from __future__ import annotations

import json
import sys
import time

from hami_devices import InsufficientResources, allocate, discover
from hami_devices.config import parse_config
from hami_devices.inventory import parse_inventory
from hami_devices.ledger.opening import ledger_target, open_ledger
from hami_devices.models import DeviceHandle

INVENTORY = {
    "nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "T4", "count": 2, "split_count": 64}]}]
}


def hold(target: str) -> None:
    ledger = open_ledger(ledger_target(target))
    with ledger.transaction() as view:
        view.add(DeviceHandle(id="torn", request={"parts": [{"memory_mib": 1}]}, grants=[]))
        print("holding", flush=True)
        time.sleep(120)  # killed here, inside the transaction


def race(target: str, attempts: int, memory: int) -> None:
    config = parse_config({"device-plugin": {"isolation-level": "none"}})
    ledger = open_ledger(ledger_target(target))
    devices = discover(parse_inventory(INVENTORY), ledger=ledger, config=config)
    print(json.dumps({"capacity": {d.info.uuid: d.info.memory_mib for d in devices}}), flush=True)
    for _ in range(attempts):
        try:
            handle = allocate(devices, {"parts": [{"memory_mib": memory}]})
        except InsufficientResources:
            print("refused", flush=True)
        else:
            print(f"granted {handle.id}", flush=True)
    ledger.close()


def main() -> None:
    verb, target = sys.argv[1], sys.argv[2]
    if verb == "hold":
        hold(target)
    else:
        race(target, int(sys.argv[3]), int(sys.argv[4]))


if __name__ == "__main__":
    main()
