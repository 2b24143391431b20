"""A scheduler's engine rebuilt from the durable ledger after a restart sees exactly what is allocated."""

from __future__ import annotations

from pathlib import Path

import hami_devices as hd
from hami_devices.ledger import SqliteLedger
from hami_devices.models import ResourceRequest
from hami_devices.scheduling import Engine

from .test_cli import run_json


def test_engine_from_the_ledger_after_a_restart(tmp_path: Path, example_inventory: Path) -> None:
    ledger_path = tmp_path / "ledger.db"
    common = ["--inventory", str(example_inventory), "--ledger", str(ledger_path)]
    made = [
        run_json("allocate", *common, "--model", "T4", "--memory", "4096", "--cores", "30"),
        run_json("allocate", *common, "--model", "910B3", "--memory", "4096", "--cores", "30"),
        run_json("allocate", *common, "--count", "2", "--cores", "100", "--model", "H100"),
    ]
    ledger = SqliteLedger(ledger_path)
    try:
        engine = Engine.from_config(example_inventory, ledger=ledger)  # a new process: everything from the ledger
        devices = hd.discover(example_inventory, ledger=ledger)
        assert {b for b in engine.cluster.bookings} == {h["id"] for h in made}
        for device in devices:
            assert engine.cluster.usage_of(device.uuid) == device.usage()
        request = ResourceRequest.single(models=["T4"], memory_mib=4_096, cores=30)
        assert engine.place(request).grants == hd.allocate(devices, request).grants
        released = made[0]["id"]
        hd.release(released, ledger=ledger)
        engine.cluster.sync(ledger.handles())
        assert released not in engine.cluster.bookings
        for device in devices:
            assert engine.cluster.usage_of(device.uuid) == device.usage()
    finally:
        ledger.close()
