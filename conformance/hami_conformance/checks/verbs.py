"""Every verb at once: discovery, monitoring, health, allocation and release (partitions made and
destroyed) from several threads, with the invariants checked afterwards.

``concurrency.threads`` races allocate and release only; an adapter's discover or read() that keeps
state shared between calls (a list it refills, a "current device" it selects before reading) is
only wrong when another thread calls it meanwhile.  Readings are compared while every thread reads
and no load changes, and only where the device's own readings alone agree before and after (a
simulated or fake device; a live one may change by itself).
"""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable
from typing import Any

from hami_conformance.bench import Bench, capacity, expect, profiles_of, share
from hami_conformance.checks import check
from hami_conformance.checks.concurrency import run_threads
from hami_conformance.facts import hardware_partition_problems, reported_partitions
from hami_conformance.invariants import bench_problems
from hami_devices.device import Device
from hami_devices.errors import InsufficientResources
from hami_devices.models import DeviceHandle, ResourceRequest

THREADS = 6
ROUNDS = 10
READINGS = ("memory_used_mib", "utilization_pct", "temperature_c", "power_w", "health")


def readings(device: Device) -> dict[str, Any]:
    metrics = device.monitor()
    return {"uuid": metrics.uuid, **{name: getattr(metrics, name) for name in READINGS}}


class Verbs:
    """The workers' shared record: what each verb saw, and the allocations each worker holds."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.lock = threading.Lock()
        self.discovered: list[list[str]] = []
        self.seen: dict[str, list[dict[str, Any]]] = {d.uuid: [] for d in bench.devices}
        self.held: list[list[DeviceHandle]] = [[] for _ in range(THREADS)]

    def discover(self) -> None:
        found = sorted(d.uuid for d in self.bench.target.factory(self.bench.ledger))
        with self.lock:
            self.discovered.append(found)

    def monitor(self, device: Device, *, record: bool = False) -> None:
        seen = readings(device)
        device.refresh_health()
        if record:
            with self.lock:
                self.seen[device.uuid].append(seen)

    def monitor_all(self, first: int = 0) -> None:
        """Every device's readings while nothing is granted or released: comparable with a reading alone.

        Each thread starts at another device (``first``): threads released together in the same order would
        read the same device at the same moment, and state shared between devices would go unseen."""
        devices = self.bench.devices
        for device in devices[first % len(devices) :] + devices[: first % len(devices)]:
            self.monitor(device, record=True)

    def allocate(self, n: int, device: Device, rng: random.Random) -> None:
        profiles = profiles_of(device)
        request: ResourceRequest
        if profiles and rng.random() < 0.5:
            request = share(1, 0, partition=rng.choice(profiles).name)  # a partition made
        else:
            request = share(max(1, capacity(device).memory_mib // rng.choice([4, 6, 8])), rng.choice([0, 10, 20]))
        try:
            handle = self.bench.allocate_on(device, request)
        except InsufficientResources:
            return
        self.held[n].append(handle)

    def release(self, n: int, rng: random.Random) -> None:
        handle = self.held[n].pop(rng.randrange(len(self.held[n])))
        self.bench.release(handle)  # and its partition destroyed

    def worker(self, n: int, group: list[Device], start: threading.Barrier) -> Callable[[], None]:
        def run() -> None:
            rng = random.Random(n)
            start.wait(timeout=30)
            for _ in range(ROUNDS):
                verb = rng.choice(("discover", "monitor", "monitor", "allocate", "release"))
                if verb == "discover":
                    self.discover()
                elif verb == "monitor":
                    for device in rng.sample(self.bench.devices, len(self.bench.devices)):
                        self.monitor(device)
                elif verb == "release" and self.held[n]:
                    self.release(n, rng)
                else:
                    self.allocate(n, rng.choice(group), rng)

        return run


def _after(start: threading.Barrier, verb: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        start.wait(timeout=30)
        verb()

    return run


def _reading_problems(bench: Bench, verbs: Verbs, before: dict[str, dict[str, Any]]) -> list[str]:
    """Readings taken by many threads at once, while no load changed, against readings taken alone."""
    problems: list[str] = []
    for device in bench.devices:
        after = readings(device)
        stable = {k for k in after if after[k] == before[device.uuid][k]}
        for seen in verbs.seen[device.uuid]:
            wrong = {k: seen[k] for k in stable if seen[k] != after[k]}
            if wrong:
                want = {k: after[k] for k in wrong}
                problems.append(f"{device.uuid}: monitor() under concurrency read {wrong}, alone it reads {want}")
                break
    return problems


@check("concurrency.every-verb")
def every_verb(bench: Bench) -> None:
    group = bench.same_node_group(1)[:3]
    reader = bench.target.profile.hardware_partitions
    baseline = {d.uuid: reported_partitions(reader, d) for d in group}
    expected = sorted(d.uuid for d in bench.target.factory(bench.ledger))
    before = {d.uuid: readings(d) for d in bench.devices}
    verbs = Verbs(bench)
    # each read-only verb first from every thread at once, then all the verbs mixed
    bursts: list[list[Callable[[], object]]] = [
        [verbs.discover] * THREADS,
        [functools.partial(verbs.monitor_all, n) for n in range(THREADS)],
    ]
    for burst in bursts:
        start = threading.Barrier(THREADS)
        errors = run_threads([_after(start, verb) for verb in burst])
        expect(not errors, f"threads calling one verb at once failed: {errors[:3]}")
    problems = _reading_problems(bench, verbs, before)
    expect(not problems, "; ".join(problems[:3]))
    start = threading.Barrier(THREADS)
    errors = run_threads([verbs.worker(n, group, start) for n in range(THREADS)])
    expect(not errors, f"threads calling every verb failed: {errors[:3]}")
    wrong = [found for found in verbs.discovered if found != expected]
    expect(not wrong, f"discovery run alongside other calls found {wrong[0] if wrong else []}, alone {expected}")
    holding = {h.id for hs in verbs.held for h in hs}
    expect(bench.live_ids() == holding, f"live {sorted(bench.live_ids())}, the threads hold {sorted(holding)}")
    live = [bench.recorded(h) for hs in verbs.held for h in hs]
    problems = bench_problems(bench)
    for device in group:
        reported = reported_partitions(reader, device)
        problems += hardware_partition_problems(device, reported, baseline[device.uuid], live)
    expect(not problems, f"after every verb at once: {'; '.join(problems[:4])}")
    for handle in live:
        bench.release(handle)
    for device in group:
        reported = reported_partitions(reader, device)
        problems += hardware_partition_problems(device, reported, baseline[device.uuid], [])
    expect(not problems, f"after releasing everything: {'; '.join(problems[:4])}")
