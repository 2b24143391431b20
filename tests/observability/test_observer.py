"""The observer records process starts and exits, health changes and usage from real limiter regions,
each transition once, however many observers poll."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices.ledger import EventKind, Ledger, MemoryLedger, SqliteLedger
from hami_devices.models import Health
from hami_devices.observability.observer import Observer, record_process_exit
from hami_devices.observability.snapshot import Sampler
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env
from tests.observability.helpers import simulated, t4_node

MIB = 1 << 20


def _hold(drivers: Drivers, wenv: Env, env: dict[str, str], mib: int) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [str(drivers.cuda), "hold", str(mib * MIB)], env={**wenv.build(shim=None), **env}, stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "READY rc=0"
    return holder


def _kinds(ledger: Ledger, allocation: str) -> list[str]:
    return [e.kind for e in ledger.events(allocation_id=allocation) if e.kind.startswith("process.")]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_process_start_and_exit_are_recorded_once(drivers: Drivers, wenv: Env, tmp_path: Path, kind: str) -> None:
    ledger: Ledger = MemoryLedger() if kind == "memory" else SqliteLedger(tmp_path / "l.db")
    devices = simulated(ledger, t4_node(1))
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 64, "cores": 30}]}, metadata={"pod": "web-0"})
    sampler = Sampler(devices, ledger, timeout_s=5)
    first, second = Observer(ledger), Observer(ledger)  # e.g. an exporter and an events --follow --observe
    assert first.observe(sampler.snapshot()) == []
    stale = sampler.snapshot()  # taken before the process starts, applied after its start was recorded

    holder = _hold(drivers, wenv, handle.env, 24)
    try:
        started = first.observe(sampler.snapshot())
        assert [(e.kind, e.data["pid"], e.data["metadata"]) for e in started] == [
            (EventKind.PROCESS_STARTED, holder.pid, {"pod": "web-0"})
        ]
        assert second.observe(sampler.snapshot()) == []  # the same transition, seen by another observer
        assert first.observe(stale) == []  # else it would record an exit: never apply older over newer
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    exited = second.observe(sampler.snapshot())
    assert [(e.kind, e.data["pid"], e.data["exit_status"]) for e in exited] == [
        (EventKind.PROCESS_EXITED, holder.pid, None)
    ]
    assert exited[0].data["memory_held_bytes"] == 24 * MIB  # killed holding it; the sampler's read reclaimed it
    assert first.observe(sampler.snapshot()) == []
    assert _kinds(ledger, handle.id) == [EventKind.PROCESS_STARTED, EventKind.PROCESS_EXITED]

    with ledger.reading() as view:
        samples = view.usage(0, time.time() + 1)
    held = [s for s in samples if s.memory_mib_seconds > 0]
    assert held and all(s.uuid == handle.grants[0].uuid and s.allocation_id == handle.id for s in samples)
    covered = sum(s.seconds for s in samples)
    assert covered > 0 and sum(s.memory_mib_seconds for s in samples) <= 24 * covered + 1e-6
    sampler.close()
    ledger.close()


def test_a_launcher_records_the_exit_status_and_the_observer_does_not_repeat_it(
    drivers: Drivers, wenv: Env
) -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(1))
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 64}]}, metadata={"pod": "job-1"})
    sampler = Sampler(devices, ledger)
    observer = Observer(ledger)
    holder = _hold(drivers, wenv, handle.env, 8)
    observer.observe(sampler.snapshot())
    holder.send_signal(signal.SIGTERM)
    status = holder.wait()
    event = record_process_exit(ledger, handle.id, holder.pid, exit_status=status)
    assert event.data["exit_status"] == -signal.SIGTERM and event.data["group"] == f"{handle.grants[0].node}/nvidia"
    assert observer.observe(sampler.snapshot()) == []
    assert _kinds(ledger, handle.id) == [EventKind.PROCESS_STARTED, EventKind.PROCESS_EXITED]
    sampler.close()


def test_processes_still_running_after_release_are_followed_until_they_exit(drivers: Drivers, wenv: Env) -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(1))
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 64}]})
    sampler = Sampler(devices, ledger)
    observer = Observer(ledger)
    holder = _hold(drivers, wenv, handle.env, 8)
    try:
        observer.observe(sampler.snapshot())
        hd.release(handle, force=True)  # the allocation goes; the process does not (its limiter refuses it more)
        assert observer.observe(sampler.snapshot()) == []
    finally:
        holder.kill()
        holder.wait()
    (exited,) = observer.observe(sampler.snapshot())
    assert exited.kind == EventKind.PROCESS_EXITED and exited.data["after_release"] is True
    assert observer.observe(sampler.snapshot()) == []
    with ledger.reading() as view:
        assert view.observations("procs/") == {}  # nothing left to follow
    sampler.close()


def test_a_process_start_is_recorded_at_the_time_the_process_started(drivers: Drivers, wenv: Env) -> None:
    """Seen two seconds after it started, the process is still recorded as started when it did."""
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(1))
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 64}]})
    sampler = Sampler(devices, ledger)
    observer = Observer(ledger)
    observer.observe(sampler.snapshot())
    before = time.time()
    holder = _hold(drivers, wenv, handle.env, 8)
    after = time.time()
    try:
        time.sleep(2)
        (started,) = observer.observe(sampler.snapshot())
    finally:
        holder.kill()
        holder.wait()
        sampler.close()
    assert started.kind == EventKind.PROCESS_STARTED and started.data["pid"] == holder.pid
    # the kernel's start time, in clock ticks after a boot time given in whole seconds: within a second
    assert before - 1.0 <= started.time <= after + 1.0 < started.data["observed_at"]


def test_health_changes_are_recorded_once() -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(2))
    sampler, observer = Sampler(devices, ledger), Observer(ledger)
    assert observer.observe(sampler.snapshot()) == []  # healthy at first sight: nothing to say
    broken = devices[1]
    # The simulated back end reports the health its DeviceInfo holds: a device that fails.
    broken._info = broken.info.model_copy(update={"health": Health.UNHEALTHY})
    (event,) = observer.observe(sampler.snapshot())
    assert (event.kind, event.uuid, event.data["from"], event.data["to"]) == (
        EventKind.HEALTH_CHANGED, broken.uuid, "healthy", "unhealthy",
    )
    assert observer.observe(sampler.snapshot()) == []
    broken._info = broken.info.model_copy(update={"health": Health.HEALTHY})
    (back,) = observer.observe(sampler.snapshot())
    assert (back.data["from"], back.data["to"]) == ("unhealthy", "healthy")
    sampler.close()


def test_a_process_is_checked_under_the_pid_this_machine_gives_it() -> None:
    from hami_devices.observability import procs

    mine = procs.own_pid_namespace()
    assert procs.local_pid(7, 4242, mine + 1) == 4242  # the limiter learnt the host's pid
    assert procs.local_pid(7, 0, mine) == 7  # same namespace: the pid is ours
    assert procs.local_pid(7, 0, mine + 1) is None  # a container's pid alone says nothing here
