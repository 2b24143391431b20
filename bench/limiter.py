"""Benchmark of the native limiter against the fake CUDA driver; prints one JSON object.

    python bench/limiter.py [--quick]

alloc_free_overhead_ns  added per cuMemAlloc_v2+cuMemFree_v2 pair by the shim (memory limit set),
                        against the same program on the fake driver without the shim, same run
launch_overhead_ns      added per cuLaunchKernel by the shim with no compute limit
over_limit_bytes_max    worst excess over the limit in an 8-process x 4-thread alloc/free storm, by the
                        region's high-water mark and by the fake driver's own count of bytes held
over_limit_bytes_max_mixed  the same storm with VMM (create, map, release; unmap later), cuMemAllocAsync
                        and an explicit memory pool mixed in, freed in stream order with occasional syncs
reclaim_latency_ms      SIGKILL of a process holding memory -> its bytes given back by a reclaim scan
                        (median and max over repetitions; the scan polls in a loop, yielding the CPU)
readmit_latency_ms      SIGKILL of the holder -> a workload spinning on cuMemAlloc is admitted
chaos                   the SIGKILL chaos storm: runs of 12 two-thread workers allocating against a 32 MiB limit,
                        one SIGKILLed every 20 ms and replaced, 6 kills a run; a worker still alive 5 s after its
                        time was up is hung.  Reports runs, kills, hangs, and the worst bytes over the limit
                        (region and fake driver)
spill_alloc_free_extra_ns  virtual device memory: what a cuMemAlloc_v2+cuMemFree_v2 pair of 4 MiB costs more when
                        the card is full and the shim serves it from host memory (managed memory with host
                        preference), against the same pair served by the card, both through the shim.  Only the
                        allocation path: on a real GPU, kernels reaching host-resident memory also pay the link
                        (PCIe or NVLink-C2C) instead of device memory bandwidth, which the fake cannot show
compute_error_points    worst |measured - target| utilization for limits 10/30/50/80 over 5 s windows
                        (the test build of the shim, reading device time from the fake runtime's state)
compute_error_points_nvml  the same with the shipped shim measuring through NVML (the fake libnvidia-ml's
                        per-process samples, HAMI_UTILIZATION_SOURCE=nvml) as on a real host
Targets: launch <= 20 ns, alloc+free <= 300 ns, over-limit 0 (all storms), reclaim <= 5 ms,
compute error <= 5, chaos hangs 0.

Overheads are medians over interleaved repetitions (with and without the shim alternate, so drift
on a busy machine hits both).  The test driver is tests/limiter/progs/cuda_driver.c.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hami_devices.limiter import DeviceLimit, Region, fake_gpu_snapshot, fake_library, shim_library  # noqa: E402

MIB = 1 << 20
TARGETS = (10, 30, 50, 80)
# The test build of the CUDA shim (native/testhooks): it can read device time from the fake runtime's
# state.  Only the compute figure without NVML uses it; everything else measures the shipped shim.
HOOK_SHIM = "hooks/libhami_cuda.so"


def build_driver(tmp: Path) -> Path:
    cc = shutil.which(os.environ.get("CC", "cc")) or "gcc"
    exe = tmp / "cuda_driver"
    subprocess.run(
        [
            cc,
            "-O2",
            f"-I{REPO / 'native' / 'include'}",
            str(REPO / "tests/limiter/progs/cuda_driver.c"),
            str(fake_library("libcuda.so.1")),
            "-lpthread",
            "-ldl",
            "-o",
            str(exe),
        ],
        check=True,
    )
    return exe


def base_env(tmp: Path, name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAMI_", "CUDA_DEVICE_", "LD_PRELOAD"))}
    env["LD_LIBRARY_PATH"] = str(fake_library("libcuda.so.1").parent)
    env["HAMI_FAKE_GPU_STATE"] = str(tmp / f"{name}.state")
    env["HAMI_FAKE_CUDA_MEMORY_MIB"] = "65536"
    # A context's memory is outside every share (the limiter never sees it): the fake's peak counts allocations only.
    env["HAMI_FAKE_CONTEXT_MIB"] = "0"
    return env


def overheads(exe: Path, tmp: Path, reps: int, n: int) -> tuple[float, float, dict[str, float]]:
    plain = base_env(tmp, "plain")
    shimmed = dict(
        base_env(tmp, "shim"),
        LD_PRELOAD=str(shim_library("libhami_cuda.so")),
        HAMI_DEVICE_MEMORY_LIMIT="32g",
        HAMI_REGION_PATH=str(tmp / "bench.region"),
    )
    samples: dict[str, list[float]] = {"alloc_plain": [], "alloc_shim": [], "launch_plain": [], "launch_shim": []}
    for _ in range(reps):
        for label, env in (("plain", plain), ("shim", shimmed)):
            out = subprocess.run([str(exe), "bench", str(n)], env=env, capture_output=True, text=True, check=True)
            result = json.loads(out.stdout)
            samples[f"alloc_{label}"].append(result["alloc_free_ns"])
            samples[f"launch_{label}"].append(result["launch_ns"])
    med = {k: statistics.median(v) for k, v in samples.items()}
    return med["alloc_shim"] - med["alloc_plain"], med["launch_shim"] - med["launch_plain"], med


def storm(exe: Path, tmp: Path, iters: int, mode: str = "") -> tuple[int, int, int]:
    """Worst bytes over the limit, allocations admitted, allocations refused."""
    limit = 32 * MIB
    name = f"storm{mode}"
    region_path = tmp / f"{name}.region"
    Region.create(region_path, [DeviceLimit(limit, 0)]).close()
    env = dict(
        base_env(tmp, name), LD_PRELOAD=str(shim_library("libhami_cuda.so")), HAMI_REGION_PATH=str(region_path)
    )
    procs = [
        subprocess.Popen(
            [str(exe), "storm", "4", str(iters), str(8 * MIB), str(seed), *([mode] if mode else [])],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in range(8)
    ]
    admitted = refused = 0
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"storm process failed with {proc.returncode}")
        counts = dict(p.split("=") for p in out.split())
        admitted, refused = admitted + int(counts["ok"]), refused + int(counts["oom"])
    with Region.open(region_path) as region:
        peak = region.device_usage()[0].memory_peak_bytes
    fake_peak = fake_gpu_snapshot(tmp / f"{name}.state")[0].peak_used_bytes
    return max(0, peak - limit, fake_peak - limit), admitted, refused


def chaos(exe: Path, tmp: Path, runs: int) -> dict[str, int]:
    """The SIGKILL chaos storm (cuda_driver chaos): hangs, kills, and the worst bytes over the limit."""
    limit = 32 * MIB
    region_path = tmp / "chaos.region"
    Region.create(region_path, [DeviceLimit(limit, 0)]).close()
    env = dict(
        base_env(tmp, "chaos"), LD_PRELOAD=str(shim_library("libhami_cuda.so")), HAMI_REGION_PATH=str(region_path)
    )
    out = subprocess.run(
        [str(exe), "chaos", str(runs), "12", "120", "20", str(8 * MIB)], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"chaos storm failed: {out.stderr}")
    counts = {k: int(v) for k, v in (part.split("=") for part in out.stdout.split())}
    with Region.open(region_path) as region:
        peak = region.device_usage()[0].memory_peak_bytes
    fake_peak = fake_gpu_snapshot(tmp / "chaos.state")[0].peak_used_bytes
    return {**counts, "over_limit_bytes_max": max(0, peak - limit, fake_peak - limit)}


def spill_cost(exe: Path, tmp: Path, reps: int, n: int) -> tuple[float, dict[str, float]]:
    """Extra ns per 4 MiB alloc+free pair served from host memory rather than by the card (both shimmed)."""
    size = 4 * MIB
    samples: dict[str, list[float]] = {"card": [], "host": []}
    for _ in range(reps):
        for label, card_mib in (("card", "65536"), ("host", "1")):  # a 1 MiB card holds none of them
            region_path = tmp / f"spill-{label}.region"
            Region.create(region_path, [DeviceLimit(1 << 30, 0, virtual_memory=True)]).close()
            env = dict(
                base_env(tmp, f"spill-{label}"),
                LD_PRELOAD=str(shim_library("libhami_cuda.so")),
                HAMI_REGION_PATH=str(region_path),
                HAMI_FAKE_CUDA_MEMORY_MIB=card_mib,
            )
            (tmp / f"spill-{label}.state").unlink(missing_ok=True)
            out = subprocess.run(
                [str(exe), "allocbench", str(n), str(size)], env=env, capture_output=True, text=True, check=True
            )
            samples[label].append(json.loads(out.stdout)["alloc_free_ns"])
    med = {k: statistics.median(v) for k, v in samples.items()}
    return med["host"] - med["card"], med


def _holder(exe: Path, env: dict[str, str], nbytes: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(exe), "hold", str(nbytes)], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "READY rc=0":
        raise SystemExit("holder was not admitted")
    return proc


def reclaim(exe: Path, tmp: Path, reps: int) -> tuple[list[float], list[float]]:
    """Milliseconds from SIGKILL of a holder to (a) a reclaim scan giving its bytes back, (b) a spinning
    workload being admitted to them."""
    limit = 64 * MIB
    region_path = tmp / "reclaim.region"
    Region.create(region_path, [DeviceLimit(limit, 0)]).close()
    env = dict(
        base_env(tmp, "reclaim"), LD_PRELOAD=str(shim_library("libhami_cuda.so")), HAMI_REGION_PATH=str(region_path)
    )
    scans, admissions = [], []
    with Region.open(region_path) as region:
        for _ in range(reps):
            holder = _holder(exe, env, 48 * MIB)
            t0 = time.perf_counter()
            holder.kill()
            while region.device_usage()[0].memory_used_bytes:
                region.reclaim_dead()
                os.sched_yield()  # polling, not starving the dying process of the CPU it needs to exit
            scans.append((time.perf_counter() - t0) * 1e3)
            holder.wait()
        for _ in range(reps):
            holder = _holder(exe, env, 48 * MIB)
            cmd = [str(exe), "waitalloc", str(32 * MIB)]
            waiter = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
            assert waiter.stdout is not None
            if not waiter.stdout.readline().startswith("WAITING"):
                raise SystemExit("the waiting workload was admitted while the holder lived")
            time.sleep(0.005)
            t0 = time.monotonic_ns()
            holder.kill()
            admitted = int(waiter.stdout.readline().split()[1])
            admissions.append((admitted - t0) / 1e6)
            waiter.wait()
            holder.wait()
            region.reclaim_dead()
    return scans, admissions


def nvml_env(tmp: Path) -> dict[str, str]:
    """What makes the shim measure through the fake NVML: its folder first on the library path, a fixture."""
    fixture = tmp / "nvml.conf"
    if not fixture.exists():  # written once: workloads read it while later ones start
        fixture.write_text("[gpu]\nname = NVIDIA Fake GPU\n")
    nvml = fake_library("nvml/libnvidia-ml.so.1").parent
    return {
        "HAMI_UTILIZATION_SOURCE": "nvml",
        "HAMI_FAKE_NVML_FIXTURE": str(fixture),
        "LD_LIBRARY_PATH": f"{nvml}:{fake_library('libcuda.so.1').parent}",
    }


def compute(exe: Path, tmp: Path, window: float, nvml: bool = False) -> dict[int, float]:
    warmup = 1.0
    loads = {}
    tag = "n" if nvml else "c"
    shim = shim_library("libhami_cuda.so") if nvml else fake_library(HOOK_SHIM)
    for target in TARGETS:
        env = dict(
            base_env(tmp, f"{tag}{target}"),
            LD_PRELOAD=str(shim),
            HAMI_DEVICE_CORE_LIMIT=str(target),
            HAMI_REGION_PATH=str(tmp / f"{tag}{target}.region"),
        )
        if nvml:
            env.update(nvml_env(tmp))
        loads[target] = subprocess.Popen(
            [str(exe), "launch", "kernel", "2000", str(warmup + window + 0.5), "0"], env=env, stdout=subprocess.DEVNULL
        )
    time.sleep(warmup)
    before = {t: fake_gpu_snapshot(tmp / f"{tag}{t}.state")[0].busy_ns for t in TARGETS}
    t0 = time.monotonic()
    time.sleep(window)
    after = {t: fake_gpu_snapshot(tmp / f"{tag}{t}.state")[0].busy_ns for t in TARGETS}
    elapsed = time.monotonic() - t0
    for proc in loads.values():
        proc.wait()
    return {t: (after[t] - before[t]) / elapsed / 1e7 for t in TARGETS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and a 2 s compute window")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hami-bench-") as name:
        tmp = Path(name)
        exe = build_driver(tmp)
        alloc_ns, launch_ns, medians = overheads(exe, tmp, reps=3 if args.quick else 7, n=200_000)
        over, admitted, refused = storm(exe, tmp, iters=5_000 if args.quick else 20_000)
        over_mixed, admitted_mixed, refused_mixed = storm(exe, tmp, iters=5_000 if args.quick else 20_000, mode="mixed")
        scans, admissions = reclaim(exe, tmp, reps=10 if args.quick else 30)
        storm_chaos = chaos(exe, tmp, runs=30 if args.quick else 100)
        spill_ns, spill_medians = spill_cost(exe, tmp, reps=3 if args.quick else 7, n=20_000)
        util = compute(exe, tmp, window=2.0 if args.quick else 5.0)
        util_nvml = compute(exe, tmp, window=2.0 if args.quick else 5.0, nvml=True)
    result = {
        "alloc_free_overhead_ns": round(max(alloc_ns, 0.0), 1),
        "launch_overhead_ns": round(max(launch_ns, 0.0), 1),
        "over_limit_bytes_max": over,
        "over_limit_bytes_max_mixed": over_mixed,
        "reclaim_latency_ms": {"median": round(statistics.median(scans), 3), "max": round(max(scans), 3)},
        "readmit_latency_ms": {"median": round(statistics.median(admissions), 3), "max": round(max(admissions), 3)},
        "chaos": storm_chaos,
        "spill_alloc_free_extra_ns": round(spill_ns, 1),
        "spill_alloc_free_ns": {k: round(v, 1) for k, v in spill_medians.items()},
        "compute_error_points": round(max(abs(util[t] - t) for t in TARGETS), 2),
        "compute_utilization_pct": {str(t): round(u, 2) for t, u in util.items()},
        "compute_error_points_nvml": round(max(abs(util_nvml[t] - t) for t in TARGETS), 2),
        "compute_utilization_pct_nvml": {str(t): round(u, 2) for t, u in util_nvml.items()},
        "storm_admitted_refused": [admitted, refused],
        "storm_mixed_admitted_refused": [admitted_mixed, refused_mixed],
        "raw_medians_ns": {k: round(v, 1) for k, v in medians.items()},
        "targets": {
            "launch_overhead_ns": 20,
            "alloc_free_overhead_ns": 300,
            "over_limit_bytes_max": 0,
            "over_limit_bytes_max_mixed": 0,
            "reclaim_latency_ms": 5,
            "chaos_hangs": 0,
            "chaos_over_limit_bytes_max": 0,
            "compute_error_points": 5,
            "compute_error_points_nvml": 5,
        },
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
