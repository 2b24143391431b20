"""Against a real PySpark ``local-cluster[2,1,1024]`` (two executor JVMs) with the machine's Java.

The README's Spark configuration, run as printed, gives each executor a fractional share
of one simulated T4 through the discovery script; tasks run in Python workers forked from
the executor's daemon, under the share's limiter, and allocate through the fake libcuda.
What is checked comes from outside the code under test: Spark's own view of each task's
resources, what the runtime granted inside the tasks, the node's ledger and the processes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hami_devices import limiter
from hami_devices.ledger import EventKind, SqliteLedger
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.spark

FIXTURE = REPO_ROOT / "tests" / "integrations" / "ray" / "fixtures" / "one-t4.conf"
FAKE_NVML = Path(limiter.fake_library("libcuda.so.1")).parent / "nvml" / "libnvidia-ml.so.1"
T4_UUID = "GPU-7a7a7a7a-0000-4000-8000-000000000000"
MIB = 1 << 20


def readme_spark_block() -> str:
    readme = (REPO_ROOT / "docs" / "workflows.md").read_text()  # the quick start (moved from the README)
    start = readme.index("```python\n# spark: one share per executor") + len("```python\n")
    return readme[start : readme.index("```", start)]


def in_task(index: int, rows: Iterator[int]) -> Iterator[dict[str, Any]]:
    """In a task's Python worker: Spark's resources for the task, and what the CUDA runtime grants it."""
    import ctypes
    import os

    from hami_conformance.workloads.cuda import _context, _driver
    from pyspark import TaskContext

    from hami_devices.limiter import Region

    cu = _driver()
    _context(cu)
    # Tasks of one executor share its share, at the same time (two at once) and one after another (Python
    # workers are reused): 1 GiB fits beside a sibling's, 4 GiB more never fits; each task frees what it got.
    codes, granted = [], []
    for mib in (1024, 4096):
        pointer = ctypes.c_uint64()
        codes.append(cu.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(mib * MIB)))
        if codes[-1] == 0:
            granted.append(pointer)
    with Region.open(os.environ["HAMI_REGION_PATH"]) as region:
        (usage,) = region.device_usage()
    for pointer in granted:
        cu.cuMemFree_v2(pointer)
    yield {
        "partition": index,
        "addresses": list(TaskContext.get().resources()["gpu"].addresses),
        "share": os.environ["HAMI_SPARK_SHARE_ID"],
        "visible": os.environ["CUDA_VISIBLE_DEVICES"],
        "preload": os.environ.get("LD_PRELOAD", ""),
        "limit_mib": usage.memory_limit_bytes // MIB,
        "codes": codes,
        "rows": list(rows),
    }


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("spark")
    (folder / "regions").mkdir()
    saved = dict(os.environ)
    os.environ.update(
        {
            "HAMI_NVML_LIBRARY": str(FAKE_NVML),
            "HAMI_FAKE_NVML_FIXTURE": str(FIXTURE),
            "HAMI_FAKE_GPU_STATE": str(folder / "fakegpu"),
            "HAMI_FAKE_MEMORY_MIB": "15360",
            "LD_LIBRARY_PATH": str(FAKE_NVML.parent.parent),
            "HAMI_REGION_DIR": str(folder / "regions"),
            "HAMI_LEDGER": str(folder / "ledger.db"),
            "HAMI_VENDORS": "nvidia",
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
        }
    )
    for unset in ("LD_PRELOAD", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):  # the README's settings name the Python
        os.environ.pop(unset, None)
    try:
        yield folder
    finally:
        os.environ.clear()
        os.environ.update(saved)


def spark_shares(ledger_path: Path) -> list[Any]:
    ledger = SqliteLedger(ledger_path)
    try:
        return [h for h in ledger.handles() if h.id.startswith("spark.")]
    finally:
        ledger.close()


def test_java_is_the_machines() -> None:
    version = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "version" in version.stderr


def test_two_executors_each_hold_a_fractional_share_released_when_the_application_stops(node: Path) -> None:
    ledger_path = node / "ledger.db"
    namespace: dict[str, Any] = {}
    started = time.monotonic()
    exec(compile(readme_spark_block(), "README.md (spark)", "exec"), namespace)  # the README's block, as printed
    spark = namespace["spark"]
    session_s = time.monotonic() - started
    try:
        sc = spark.sparkContext
        job = time.monotonic()
        results = sc.parallelize(range(8), 4).mapPartitionsWithIndex(in_task).collect()
        job_s = time.monotonic() - job
        held = spark_shares(ledger_path)
        app_id = sc.applicationId
    finally:
        spark.stop()
    print(f"spark: session {session_s:.1f} s, first job {job_s:.1f} s")

    # two executors, each with its own share of the one T4: 4 GiB and 40 % each
    assert len(held) == 2
    assert {h.grants[0].uuid for h in held} == {T4_UUID}
    assert [(h.grants[0].memory_mib, h.grants[0].cores) for h in held] == [(4096, 40), (4096, 40)]
    assert {h.metadata["spark_app"] for h in held} == {app_id}
    assert sorted(h.metadata["spark_executor"] for h in held) == ["0", "1"]
    # inside every task: Spark's fractional resource, the executor's share, and the limiter's refusal past it
    assert len(results) == 4
    for seen in results:
        assert len(seen["addresses"]) == 1  # a standalone executor: the share slot its worker gave it
        assert seen["share"] in {h.id for h in held} and seen["visible"] == T4_UUID
        assert "libhami_cuda.so" in seen["preload"] and seen["limit_mib"] == 4096
        assert seen["codes"] == [0, 2]  # CUDA_SUCCESS, then CUDA_ERROR_OUT_OF_MEMORY from the limiter
    assert {seen["share"] for seen in results} <= {h.id for h in held}
    assert sorted(row for seen in results for row in seen["rows"]) == list(range(8))

    # the executors exit with the application: each watcher releases its share
    deadline = time.monotonic() + 90
    while spark_shares(ledger_path):
        assert time.monotonic() < deadline, f"shares still held: {[h.id for h in spark_shares(ledger_path)]}"
        time.sleep(0.5)
    ledger = SqliteLedger(ledger_path)
    try:
        released = [e for e in ledger.events(kinds=[EventKind.RELEASED]) if e.allocation_id.startswith("spark.")]
    finally:
        ledger.close()
    assert sorted(e.allocation_id for e in released) == sorted(h.id for h in held)
    assert all(re.match(r"spark: executor process \d+ exited", e.data["reason"]) for e in released)
    # the usage report shows the application of each share
    usage = subprocess.run(
        [str(Path(sys.executable).parent / "hami-devices"), "usage", "--from", "0", "--by", "application",
         "--json", "--ledger", str(ledger_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert usage.returncode == 0, usage.stderr
    (row,) = json.loads(usage.stdout)["rows"]
    assert row["group"] == app_id and row["allocations"] == 2
