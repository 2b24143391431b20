"""A scheduler's engine rebuilt from the durable ledger after a restart sees exactly what is allocated."""

from __future__ import annotations

import contextlib
from pathlib import Path

import hami_devices as hd
from hami_devices.assembly import build_engine
from hami_devices.ledger import SqliteLedger
from hami_devices.models import ResourceRequest

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
        engine = build_engine(example_inventory, ledger=ledger)  # a new process: everything from the ledger
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


def test_the_ledger_keeps_what_the_allocator_learned(tmp_path: Path, example_inventory: Path) -> None:
    from hami_devices.config import parse_config
    from hami_devices.scheduling.mix import load_from

    config = parse_config(
        {"scheduler": {"policy": "fragmentation-aware"}, "device-plugin": {"isolation-level": "none"}}
    )
    ledger = SqliteLedger(tmp_path / "ledger.db")
    try:
        devices = hd.discover(example_inventory, config=config, ledger=ledger)
        for _ in range(3):
            hd.allocate(devices, ResourceRequest.single(models=["T4"], memory_mib=4_096, cores=25))
        with contextlib.suppress(hd.InsufficientResources):
            hd.allocate(devices, ResourceRequest.single(models=["T4"], memory_mib=10**6))
        with ledger.reading() as view:
            kept = load_from(view)
        assert kept is not None and kept.seen == 4  # a refused request teaches the mix too
        restarted = build_engine(example_inventory, config, ledger=ledger).learned_mix()
        assert restarted is not None and restarted.to_dict() == kept.to_dict()
    finally:
        ledger.close()


def test_a_host_only_allocation_keeps_its_node_across_a_restart(tmp_path: Path, example_inventory: Path) -> None:
    """A placement with no devices (host CPU and memory only) is committed with the node the engine chose,
    and a scheduler rebuilt from the ledger books it there again (it used to fail: no grant, no node)."""
    path = tmp_path / "ledger.db"
    ledger = SqliteLedger(path)
    try:
        engine = build_engine(example_inventory, ledger=ledger)
        devices = hd.discover(example_inventory, ledger=ledger)
        placement = engine.place(ResourceRequest(parts=[], host_cpu_milli=60_000, host_memory_mib=4096))
        handle = hd.allocate(devices, placement)
        assert handle.grants == [] and handle.node == placement.node
        (granted,) = ledger.events(kinds=["allocation.granted"])
        assert granted.node == placement.node
    finally:
        ledger.close()
    restarted = SqliteLedger(path)
    try:
        engine = build_engine(example_inventory, ledger=restarted)  # a new process
        booking = engine.cluster.bookings[handle.id]
        assert (booking.node, booking.grants, booking.host_cpu_milli) == (placement.node, [], 60_000)
        assert engine.cluster.nodes[placement.node].cpu_used == 60_000
        hd.release(handle.id, ledger=restarted)
        engine.cluster.sync(restarted.handles())
        assert engine.cluster.nodes[placement.node].cpu_used == 0
    finally:
        restarted.close()
