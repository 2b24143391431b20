"""What a hami share costs a Ray task: one JSON object.

A local Ray node on the fake NVIDIA libraries (fake NVML discovery, fake libcuda, limiter
preloaded).  Each round runs a task in a fresh worker twice: plain (a distinct ``env_vars``
runtime env, so Ray starts a new worker as it does for every share) and under a share
(``@share``, the plugin grants, preloads and releases).  Reported: medians of the round
trips, their ratio (measured in one run, on one machine), the plugin's release lag after
``ray.get`` returns, and the node's start-up time.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROUNDS = int(os.environ.get("HAMI_BENCH_ROUNDS", "5"))
REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    from hami_devices import limiter

    folder = Path(tempfile.mkdtemp(prefix="hami-ray-bench-"))
    fakes = Path(limiter.fake_library("libcuda.so.1")).parent
    os.environ.update(
        {
            "HAMI_NVML_LIBRARY": str(fakes / "nvml" / "libnvidia-ml.so.1"),
            "HAMI_FAKE_NVML_FIXTURE": str(REPO / "tests/integrations/ray/fixtures/one-t4.conf"),
            "HAMI_FAKE_GPU_STATE": str(folder / "fakegpu"),
            "HAMI_FAKE_MEMORY_MIB": "15360",
            "LD_LIBRARY_PATH": str(fakes),
            "HAMI_REGION_DIR": str(folder),
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
        }
    )
    import ray

    import hami_devices as hd
    from hami_devices.integrations import ray as hray

    started = time.perf_counter()
    hray.init(ledger=folder / "ledger.db", vendors=["nvidia"], num_cpus=2, num_gpus=0,
              include_dashboard=False, _temp_dir=str(folder / "r"), logging_level="error")
    start_s = time.perf_counter() - started
    ledger = hd.SqliteLedger(folder / "ledger.db")

    def work() -> int:
        return os.getpid()

    plain = ray.remote(max_calls=1)(work)
    shared = hray.share(memory_mib=1024, cores=20, models=["T4"])(work)
    plain_s, shared_s, release_s = [], [], []
    ray.get(plain.remote())  # warm the driver's function export
    for _ in range(ROUNDS):
        t = time.perf_counter()
        ray.get(plain.options(runtime_env={"env_vars": {"BENCH": uuid.uuid4().hex}}).remote())
        plain_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        ray.get(shared.remote())
        done = time.perf_counter()
        shared_s.append(done - t)
        while ledger.handles():
            time.sleep(0.01)
        release_s.append(time.perf_counter() - done)
    ray.shutdown()
    median_plain, median_shared = statistics.median(plain_s), statistics.median(shared_s)
    print(json.dumps({
        "bench": "ray_shares",
        "rounds": ROUNDS,
        "node_start_s": round(start_s, 2),
        "plain_task_fresh_worker_s": round(median_plain, 3),
        "shared_task_s": round(median_shared, 3),
        "shared_over_plain": round(median_shared / median_plain, 2),
        "release_after_return_s": round(statistics.median(release_s), 3),
        "release_after_return_max_s": round(max(release_s), 3),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
