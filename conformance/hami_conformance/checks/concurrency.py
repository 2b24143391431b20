"""Concurrency: threads allocating and releasing at once keep every invariant."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from hami_conformance.bench import Bench, capacity, expect, share
from hami_conformance.checks import check
from hami_conformance.invariants import bench_problems, device_problems
from hami_devices.errors import InsufficientResources, UnknownAllocation
from hami_devices.models import DeviceHandle

THREADS = 8
ROUNDS = 12


def run_threads(workers: list[Callable[[], None]]) -> list[str]:
    errors: list[str] = []
    lock = threading.Lock()

    def guarded(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=guarded, args=(w,), daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        if thread.is_alive():
            errors.append("a worker thread hung for 60 s (deadlock?)")
    return errors


@check("concurrency.threads")
def threads(bench: Bench) -> None:
    group = bench.same_node_group(1)[:3]
    lock = threading.Lock()
    held: list[list[DeviceHandle]] = [[] for _ in range(THREADS)]
    issued: list[str] = []
    released: list[str] = []
    watcher_problems: list[str] = []
    stop = threading.Event()
    start = threading.Barrier(THREADS)

    def watch() -> None:
        while not stop.is_set() and not watcher_problems:
            for device in group:
                problems = device_problems(bench, device, check_monitor=False)
                if problems:
                    watcher_problems.extend(problems)
                    break

    def worker(n: int, seed: int, release_share: float) -> Callable[[], None]:
        def run() -> None:
            rng = random.Random(seed)
            start.wait(timeout=30)
            for _ in range(ROUNDS):
                if held[n] and rng.random() < release_share:
                    handle = held[n].pop(rng.randrange(len(held[n])))
                    bench.release(handle)
                    with lock:
                        released.append(handle.id)
                    continue
                device = rng.choice(group)
                cap = capacity(device)
                memory = max(1, cap.memory_mib // rng.choice([3, 4, 6, 8]))
                try:
                    handle = bench.allocate_on(device, share(memory, rng.choice([0, 10, 25, 40])))
                except InsufficientResources:
                    continue
                held[n].append(handle)
                with lock:
                    issued.append(handle.id)

        return run

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # Phase 1: everybody allocates at once (races on the last free share).
        errors = run_threads([worker(n, n, 0.0) for n in range(THREADS)])
        expect(not errors, f"allocation threads failed: {errors[:3]}")
        problems = bench_problems(bench)
        expect(not problems, f"after concurrent allocation: {'; '.join(problems[:5])}")
        # Phase 2: allocation and release mixed.
        start = threading.Barrier(THREADS)
        errors = run_threads([worker(n, n + THREADS, 0.5) for n in range(THREADS)])
        expect(not errors, f"allocate/release threads failed: {errors[:3]}")
    finally:
        stop.set()
        watcher.join(timeout=30)
    expect(not watcher_problems, f"an invariant broke while threads were running: {'; '.join(watcher_problems[:5])}")
    dupes = sorted({i for i in issued if issued.count(i) > 1})
    expect(not dupes, f"concurrent allocations returned the same handle id: {dupes}")
    # the live set is exactly what the threads hold: nothing lost, nothing extra
    holding = {h.id for hs in held for h in hs}
    expect(bench.live_ids() == holding, f"live {len(bench.live_ids())} allocations, threads hold {len(holding)}")
    problems = bench_problems(bench)
    expect(not problems, f"after concurrent allocate/release: {'; '.join(problems[:5])}")

    # Phase 3: two threads race to release each handle; exactly one may succeed.
    handles = [h for hs in held for h in hs]
    wins: dict[str, int] = {h.id: 0 for h in handles}

    def releaser(order: list[DeviceHandle]) -> Callable[[], None]:
        def run() -> None:
            for handle in order:
                try:
                    bench.release(handle)
                except UnknownAllocation:
                    continue
                with lock:
                    wins[handle.id] += 1

        return run

    errors = run_threads([releaser(handles), releaser(list(reversed(handles)))])
    expect(not errors, f"release threads failed: {errors[:3]}")
    doubled = sorted(i for i, n in wins.items() if n != 1)
    expect(not doubled, f"racing releases succeeded {[wins[i] for i in doubled]} times for handles {doubled[:5]}")
    expect(not bench.live_ids(), f"{len(bench.live_ids())} allocations left after releasing everything")
    for device in group:
        usage = bench.state(device).usage
        expect(usage.sharers == 0 and usage.memory_mib == 0, f"{device.uuid} is not empty at the end: {usage}")
