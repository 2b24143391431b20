"""Whoever reads a region reclaims its dead: a workload killed while holding memory stops counting in the
exporter's series, its usage samples and the chargeback report at the first observation after its death,
though no shim of its allocation ever allocates again and nobody runs ``monitor`` or ``allocations``."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices.ledger import EventKind, SqliteLedger
from hami_devices.observability import names
from hami_devices.observability.observer import Observer
from hami_devices.observability.series import series
from hami_devices.observability.snapshot import Sampler, Snapshot
from hami_devices.observability.usage import usage_report
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env
from tests.observability.helpers import simulated, t4_node

MIB = 1 << 20
HELD_MIB = 24


def _allocation_memory_used(snapshot: Snapshot, allocation: str) -> float:
    """``hami_allocation_memory_used_bytes`` of the allocation's one grant, as the exporter serves it."""
    metric = names.ALLOCATION_MEMORY_USED
    at = metric.labels.index("allocation_id")
    (value,) = [value for labels, value in series(snapshot)[metric] if labels[at] == allocation]
    return value


def test_a_killed_process_stops_counting_at_the_next_observation(
    drivers: Drivers, wenv: Env, tmp_path: Path
) -> None:
    ledger = SqliteLedger(tmp_path / "ledger.db")
    devices = simulated(ledger, t4_node(1))
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 64, "cores": 30}]})
    sampler, observer = Sampler(devices, ledger, timeout_s=5), Observer(ledger)
    holder = subprocess.Popen(
        [str(drivers.cuda), "hold", str(HELD_MIB * MIB)], env={**wenv.build(shim=None), **handle.env},
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "READY rc=0"
        alive = sampler.snapshot()
        observer.observe(alive)
        assert _allocation_memory_used(alive, handle.id) == HELD_MIB * MIB
    finally:
        holder.send_signal(signal.SIGKILL)  # no exit handler runs: its slot in the region keeps the 24 MiB
        holder.wait()

    dead = sampler.snapshot()
    exited = observer.observe(dead)
    assert _allocation_memory_used(dead, handle.id) == 0.0
    (reading,) = dead.regions
    assert reading.grants[handle.grants[0].uuid].memory_used_bytes == 0
    assert [(e.kind, e.data["pid"], e.data["memory_held_bytes"]) for e in exited] == [
        (EventKind.PROCESS_EXITED, holder.pid, HELD_MIB * MIB)  # what the reader took back from the dead
    ]
    time.sleep(0.2)
    later = sampler.snapshot()
    observer.observe(later)
    assert _allocation_memory_used(later, handle.id) == 0.0

    with ledger.reading() as view:
        samples = view.usage(0, time.time() + 1)
    # Usage runs linearly between readings: 24 MiB at `alive` down to 0 at `dead` (the trapezoid), then 0.  Had
    # the dead slot been left charged, the second stretch would count 24 MiB too.
    held_mib_s = HELD_MIB * (dead.time - alive.time) / 2
    assert sum(s.memory_mib_seconds for s in samples) == pytest.approx(held_mib_s)
    # The chargeback report is those samples, over the device's memory.
    report = usage_report(ledger, 0, later.time + 3600, "allocation", now=later.time)
    (row,) = report.rows
    assert row.used_memory_share_hours == pytest.approx(held_mib_s / devices[0].info.memory_mib / 3600)
    sampler.close()
    ledger.close()
