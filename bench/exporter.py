"""Exporter scrape cost: latency p50/p99 and CPU per scrape with 64 devices and 640 allocations.

The exporter runs in its own process, as ``hami-devices exporter`` does: 16 GPUs
read live through the real NVIDIA binding on the fake NVML (a generated 16 x T4
fixture) plus 48 simulated devices on 6 inventory nodes, one SQLite ledger
holding 640 allocations (10 per device, each with its limiter region and
workload metadata).  This process scrapes ``/metrics`` over loopback (asking for
gzip, as Prometheus does) ``--scrapes`` times, one after another, timing each;
the exporter's CPU time per scrape comes from its ``/proc/<pid>/stat`` before and
after.  The observer loop is off while scrapes are timed; one observation pass
(events and usage samples for all 640 allocations) is timed separately.

Two modes, one after the other in the same exporter process:

- ``on_demand`` (``--refresh-interval 0``): every scrape reads the libraries, the
  regions and the ledger, renders and compresses.
- ``refreshed`` (the CLI's default ``--refresh-interval 5``): a background thread
  does that every 5 s and a scrape sends the last result.  Its scrape CPU counts
  whatever refreshes fell in the timed window (``snapshots_served`` - 1 of them);
  ``refresh_cpu_ms`` is the CPU of one refresh (snapshot, render, gzip) on its
  own, in the exporter process, with every region as it was and with every
  region changed since the last refresh (the worst case: all allocations' usage
  re-read, re-rendered and re-compressed).  Divided by the interval, it is what
  the exporter spends while nobody scrapes.

    python bench/exporter.py [--scrapes 200] [--allocations 640]

Target: p99 <= 100 ms on this machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

_STAMP = re.compile(r"^hami_exporter_snapshot_timestamp_seconds (\S+)$", re.M)
NVML_GPUS = 16
SIM_NODES = 6
SIM_PER_NODE = 8


def _fixture(path: Path) -> None:
    sections = ["driver_version = 535.161.08"]
    for i in range(NVML_GPUS):
        sections.append(
            f"[gpu]\nname = Tesla T4\nuuid = GPU-b0b0b0b0-0000-4000-8000-{i:012x}\nmemory_mib = 15360\n"
            f"reserved_mib = 256\nbus_id = 00000000:{0x10 + i:02X}:00.0\npci_device_id = 0x1EB810DE\n"
            f"numa = {i // 8}\ncc = 7.5\narch = 6\nutil = {i % 100} 0\ntemp = {40 + i}\npower_mw = {25000 + i}"
        )
    path.write_text("\n\n".join(sections) + "\n")


def serve(ledger_path: str, allocations: int) -> None:
    """The exporter process: fill the ledger, then serve until stdin closes."""
    import hami_devices as hd
    from hami_devices.config import parse_config
    from hami_devices.inventory import parse_inventory
    from hami_devices.ledger import SqliteLedger
    from hami_devices.observability import server
    from hami_devices.observability.observer import Observer
    from hami_devices.scheduler import ClusterState, Engine

    config = parse_config({"device-plugin": {"isolation-level": "hard"}})
    ledger = SqliteLedger(ledger_path)
    devices = hd.discover(vendors=["nvidia"], config=config, ledger=ledger)
    inventory = {
        "nodes": [
            {"name": f"sim-{n}", "devices": [{"vendor": "nvidia", "model": "T4", "count": SIM_PER_NODE}]}
            for n in range(SIM_NODES)
        ]
    }
    devices += hd.discover(parse_inventory(inventory), config=config, ledger=ledger)
    assert len(devices) == NVML_GPUS + SIM_NODES * SIM_PER_NODE, len(devices)
    engine = Engine(ClusterState.from_devices(devices))
    per_device = allocations // len(devices)
    for i in range(allocations):
        device = devices[(i // per_device) % len(devices)]
        request = {"parts": [{"memory_mib": 1024, "cores": 100 // per_device, "uuids": [device.uuid]}]}
        handle = hd.allocate(
            devices,
            engine.place(hd.ResourceRequest.model_validate(request)),
            metadata={"pod": f"pod-{i}", "namespace": f"ns-{i % 8}", "container": "main", "queue": f"q{i % 4}",
                      "owner": f"team-{i % 5}", "workload": f"job-{i // 4}"},
        )
        engine.cluster.book(handle)
    exporter = server.start(devices, ledger, listen="127.0.0.1:0", observe_interval_s=0)
    observer = Observer(ledger)
    passes = []
    for _ in range(3):
        snapshot = exporter.sampler.snapshot()
        begin = time.perf_counter()
        observer.observe(snapshot)
        passes.append(time.perf_counter() - begin)
    refresh = _refresh_costs(exporter, [h.regions for h in ledger.handles()])
    print(json.dumps({"port": exporter.port, "devices": len(devices), "allocations": allocations,
                      "observe_pass_ms": statistics.median(passes) * 1000, **refresh}), flush=True)
    sys.stdin.readline()  # the parent is done scraping on_demand
    exporter.stop()
    exporter = server.start(devices, ledger, listen="127.0.0.1:0", observe_interval_s=0, refresh_interval_s=5.0)
    print(json.dumps({"port": exporter.port}), flush=True)
    sys.stdin.read()
    exporter.stop()
    ledger.close()


def _refresh_costs(exporter: Any, paths: list[dict[str, str]]) -> dict[str, float]:
    """CPU of one refresh (snapshot, render, gzip) in this process, median of 20, with nothing changed and with
    every region changed (its memory limit toggled, so every reading is new and re-rendered)."""
    from hami_devices.limiter import DeviceLimit, Region

    regions = [Region.open(path) for group in paths for path in group.values()]

    def cpu_of(before: Any = None) -> float:
        times = []
        for i in range(20):
            if before is not None:
                before(i)
            begin = time.process_time()
            exporter.publisher.refresh().gzipped()
            times.append(time.process_time() - begin)
        return statistics.median(times) * 1000

    def touch(i: int) -> None:
        for region in regions:
            region.set_limit(0, DeviceLimit((1 << 30) + (i % 2), 0))

    unchanged = cpu_of()
    changed = cpu_of(touch)
    for region in regions:
        region.close()
    return {"refresh_cpu_ms": unchanged, "refresh_cpu_ms_all_changed": changed}

def _cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _scrape(port: int, scrapes: int, pid: int) -> tuple[dict[str, Any], bytes]:
    # As Prometheus scrapes: it asks for gzip.
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"})
    body = b""
    for _ in range(5):  # warm-up: first scrapes decode the handles and open the regions
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
    latencies = []
    bodies = []
    cpu_before = _cpu_seconds(pid)
    for _ in range(scrapes):
        begin = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        latencies.append(time.perf_counter() - begin)
        bodies.append(body)
    cpu = _cpu_seconds(pid) - cpu_before
    # Snapshots served in the window: every scrape's in on_demand, the refresher's in refreshed.
    taken = {_STAMP.search(gzip.decompress(b).decode()).group(1) for b in bodies}  # type: ignore[union-attr]
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000
    return {
        "latency_ms": {
            "p50": round(statistics.median(latencies) * 1000, 2),
            "p99": round(p99, 2),
            "max": round(ordered[-1] * 1000, 2),
            "mean": round(statistics.fmean(latencies) * 1000, 2),
        },
        "exporter_cpu_ms_per_scrape": round(cpu / scrapes * 1000, 2),
        "snapshots_served": len(taken),
        "meets_target": p99 <= 100,
    }, body


def _series(body: bytes) -> int:
    return sum(1 for line in gzip.decompress(body).decode().splitlines() if line and not line.startswith("#"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--allocations", type=int, default=640)
    parser.add_argument("--serve", metavar="LEDGER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.allocations)
        return

    from hami_devices.limiter import fake_library

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="hami-bench-exporter-") as tmp:
        fixture = Path(tmp) / "t4x16.conf"
        _fixture(fixture)
        env = dict(os.environ)
        env.update(
            HAMI_NVML_LIBRARY=str(fake_library("nvml/libnvidia-ml.so.1")),
            HAMI_FAKE_NVML_FIXTURE=str(fixture),
            HAMI_REGION_DIR=str(Path(tmp) / "regions"),
            PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
        )
        started = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(Path(tmp) / "ledger.db"), "--allocations",
             str(args.allocations)],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert child.stdout is not None and child.stdin is not None
        ready = json.loads(child.stdout.readline())
        setup_s = time.perf_counter() - started
        on_demand, body = _scrape(ready["port"], args.scrapes, child.pid)
        child.stdin.write("next\n")
        child.stdin.flush()
        second = json.loads(child.stdout.readline())
        refreshed, refreshed_body = _scrape(second["port"], args.scrapes, child.pid)
        child.stdin.close()
        child.wait(timeout=30)
    print(json.dumps({
        "devices": ready["devices"],
        "allocations": ready["allocations"],
        "scrapes": args.scrapes,
        "series_per_scrape": _series(body),
        "same_series_refreshed": _series(refreshed_body) == _series(body),
        "bytes_per_scrape": len(gzip.decompress(body)),
        "gzip_bytes_per_scrape": len(body),
        "on_demand": on_demand,
        "refreshed": {"refresh_interval_s": 5.0, **refreshed},
        "refresh_cpu_ms": round(ready["refresh_cpu_ms"], 2),
        "refresh_cpu_ms_all_changed": round(ready["refresh_cpu_ms_all_changed"], 2),
        "observe_pass_ms": round(ready["observe_pass_ms"], 2),
        "load_average": {"before": [round(x, 2) for x in load_before],
                         "after": [round(x, 2) for x in os.getloadavg()]},
        "setup_s": round(setup_s, 1),
        "target_p99_ms": 100,
    }))


if __name__ == "__main__":
    main()
