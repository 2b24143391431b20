"""DAGs for the Airflow tests: tasks under hami shares of one simulated T4 (the fake libcuda under the shim).

Each probe runs in its task's process, allocates device memory through the CUDA driver
API (looked up in the global scope, where the preloaded limiter comes first), and
writes what it saw to ``$HAMI_TEST_REPORTS/<task>-<try>.json`` for the test to read.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG

from hami_devices.integrations import airflow as hami

MIB = 1 << 20


def report(name: str, **seen: object) -> None:
    folder = Path(os.environ["HAMI_TEST_REPORTS"])
    seen.update(
        pid=os.getpid(),
        share=os.environ.get(hami.SHARE_VAR),
        visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
        preload=os.environ.get("LD_PRELOAD"),
        region=os.environ.get("HAMI_REGION_PATH"),
        limit=os.environ.get("HAMI_DEVICE_MEMORY_LIMIT_0"),
    )
    (folder / f"{name}.json").write_text(json.dumps(seen))


def allocations(sizes_mib: list[int]) -> list[int]:
    """cuMemAlloc_v2 of each size on device 0, in one context: the return codes."""
    from hami_conformance.workloads.cuda import _context, _driver

    cu = _driver()
    _context(cu)
    codes = []
    for mib in sizes_mib:
        pointer = ctypes.c_uint64()
        codes.append(cu.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(mib * MIB)))
    return codes


def probe(name: str, sizes_mib: list[int]) -> list[int]:
    codes = allocations(sizes_mib)
    report(name, codes=codes)
    return codes


def probe_then_fail(name: str) -> None:
    report(name, codes=allocations([256]))
    raise RuntimeError("the task's own failure")


def probe_then_hang(name: str) -> None:
    report(name, codes=allocations([256]))
    time.sleep(600)  # until the timeout (or the kill) ends it


with DAG("hami_shares", schedule=None, catchup=False) as shares_dag:
    small = hami.task(models=["T4"], memory_mib=1024, cores=30, task_id="small")(probe)("small", [512, 1024])
    large = hami.task(models=["T4"], memory_mib=4096, cores=60, task_id="large")(probe)("large", [2048, 4096])
    bash = hami.HamiBashOperator(
        task_id="bash",
        hami={"models": ["T4"], "memory_mib": 1024, "cores": 10},
        # granted 512 MiB, then refused 2048 MiB (exit 2, the runtime's out-of-memory) by the limiter
        bash_command=(
            '"$HAMI_TEST_PYTHON" -m hami_conformance.workloads.cuda alloc 512 && '
            '{ "$HAMI_TEST_PYTHON" -m hami_conformance.workloads.cuda alloc 2048; test $? -eq 2; } && '
            'echo "bash share $HAMI_AIRFLOW_SHARE limit $HAMI_DEVICE_MEMORY_LIMIT_0" > "$HAMI_TEST_REPORTS/bash.txt"'
        ),
    )
    failing = hami.task(models=["T4"], memory_mib=1024, task_id="failing")(probe_then_fail)("failing")
    timed_out = hami.task(
        models=["T4"], memory_mib=1024, task_id="timed_out", execution_timeout=timedelta(seconds=25)
    )(probe_then_hang)("timed_out")


with DAG("hami_refusals", schedule=None, catchup=False) as refusals_dag:
    # never fits a 15 GiB T4: failed at once, no retry
    hami.task(models=["T4"], memory_mib=20480, task_id="too_big", retries=2)(probe)("too_big", [1])
    # fits once the test releases what holds the T4: the retry waits for capacity
    hami.task(
        models=["T4"], memory_mib=4096, cores=50, hami_queue="research", task_id="waits",
        retries=3, retry_delay=timedelta(seconds=2),
    )(probe)("waits", [4096])


with DAG("hami_killed", schedule=None, catchup=False) as killed_dag:
    hami.task(models=["T4"], memory_mib=2048, task_id="hangs")(probe_then_hang)("hangs")
