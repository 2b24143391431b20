"""Against a real Airflow: ``airflow dags test`` runs DAGs whose tasks hold hami shares of one simulated T4.

Every task's process is started by the operator under its share's environment (the CUDA
shim preloaded, the region, the limits) and calls the fake libcuda through the global
symbol scope, where the shim comes first.  What the tests check comes from outside the
code under test: Airflow's metadata database (task states, tries), what each task
process saw and was granted by the runtime, the node's ledger and its event log, and
the processes themselves.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hami_devices.ledger import EventKind
from tests.conftest import REPO_ROOT
from tests.integrations.airflow.conftest import GPU_MIB, AirflowNode

pytestmark = pytest.mark.airflow

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
T4_UUID = "GPU-7a7a7a7a-0000-4000-8000-000000000000"
HAMI = str(Path(sys.executable).parent / "hami-devices")


def events_of(node: AirflowNode, dag_id: str, kind: EventKind) -> list[Any]:
    ledger = node.ledger()
    try:
        return [e for e in ledger.events(kinds=[kind]) if e.data.get("metadata", {}).get("dag_id") == dag_id]
    finally:
        ledger.close()


def live_shares(node: AirflowNode) -> list[Any]:
    ledger = node.ledger()
    try:
        return list(ledger.handles())
    finally:
        ledger.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def cli(node: AirflowNode, *args: str) -> Any:
    run = subprocess.run([HAMI, *args], env=node.env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout) if "--json" in args else run.stdout


@pytest.fixture(scope="module")
def shares_run(airflow_node: AirflowNode) -> str:
    return airflow_node.run("dags", "test", "hami_shares", log="dags-test-shares")


def test_two_tasks_share_one_t4_each_under_its_own_limit(airflow_node: AirflowNode, shares_run: str) -> None:
    states = airflow_node.task_instances("hami_shares")
    assert states["small"] == ("success", 1) and states["large"] == ("success", 1), shares_run[-4000:]
    small, large = airflow_node.report("small"), airflow_node.report("large")
    # each task's own limit: the allocation that fits is granted, the one past the limit refused by the runtime
    assert small["codes"] == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY]
    assert large["codes"] == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY]
    assert (small["limit"], large["limit"]) == ("1024m", "4096m")
    for seen in (small, large):
        assert seen["pid"] != os.getpid() and seen["share"] and Path(seen["region"]).name.startswith(seen["share"])
        assert "libhami_cuda.so" in seen["preload"]
    assert small["visible"] == large["visible"]  # the same device, two shares
    granted = {e.data["metadata"]["task_id"]: e for e in events_of(airflow_node, "hami_shares", EventKind.GRANTED)}
    assert {granted[t].data["grants"][0]["uuid"] for t in ("small", "large")} == {T4_UUID}
    assert [(g["memory_mib"], g["cores"]) for t in ("small", "large") for g in granted[t].data["grants"]] == [
        (1024, 30),
        (4096, 60),
    ]
    # the bash operator's command ran under its share too: 512 MiB granted, 2048 MiB refused (exit 2)
    assert states["bash"] == ("success", 1)
    assert (airflow_node.reports / "bash.txt").read_text().split()[-1] == "1024m"


def test_each_share_carries_the_task_identity_and_is_released(airflow_node: AirflowNode, shares_run: str) -> None:
    granted = events_of(airflow_node, "hami_shares", EventKind.GRANTED)
    released = events_of(airflow_node, "hami_shares", EventKind.RELEASED)
    assert sorted(e.data["metadata"]["task_id"] for e in granted) == ["bash", "failing", "large", "small", "timed_out"]
    for event in granted:
        meta = event.data["metadata"]
        assert meta["workload"] == f"hami_shares/{meta['task_id']}"
        assert meta["run_id"].startswith("manual__") and meta["try_number"] == "1"
    # released whatever the end: success (small, large, bash), failure (failing), timeout (timed_out)
    assert sorted(e.allocation_id for e in released) == sorted(e.allocation_id for e in granted)
    assert live_shares(airflow_node) == []
    assert not list((airflow_node.folder / "regions").iterdir())


def test_a_failing_task_and_a_timed_out_task_release_their_shares(airflow_node: AirflowNode, shares_run: str) -> None:
    states = airflow_node.task_instances("hami_shares")
    assert states["failing"][0] == "failed" and states["timed_out"][0] == "failed"
    assert "the task's own failure" in shares_run
    assert "AirflowTaskTimeout" in shares_run or "Timeout" in shares_run
    # both task processes had their share (their allocation granted), and none outlives it
    for name in ("failing", "timed_out"):
        seen = airflow_node.report(name)
        assert seen["codes"] == [CUDA_SUCCESS] and seen["share"]
        assert not pid_alive(seen["pid"])


def test_usage_groups_the_shares_by_dag_and_task(airflow_node: AirflowNode, shares_run: str) -> None:
    ledger = str(airflow_node.ledger_path)
    by_task = cli(airflow_node, "usage", "--from", "0", "--by", "task", "--json", "--ledger", ledger)
    groups = {row["group"]: row for row in by_task["rows"]}
    assert {"hami_shares/small", "hami_shares/large", "hami_shares/bash"} <= set(groups)
    assert groups["hami_shares/small"]["model"] == "Tesla T4" or "T4" in groups["hami_shares/small"]["model"]
    by_dag = cli(airflow_node, "usage", "--from", "0", "--by", "dag", "--json", "--ledger", ledger)
    assert "hami_shares" in {row["group"] for row in by_dag["rows"]}


def test_refusals_carry_the_codes_and_a_retry_waits_for_capacity(airflow_node: AirflowNode, shares_run: str) -> None:
    # Something else holds most of the T4: the 4 GiB share does not fit now, but will.
    blocker = cli(
        airflow_node, "allocate", "--ledger", str(airflow_node.ledger_path), "--vendor", "nvidia",
        "--model", "T4", "--memory", str(GPU_MIB - 1024), "--json",
    )
    process = airflow_node.start("dags", "test", "hami_refusals", log="dags-test-refusals")
    started = time.monotonic()
    try:
        wait_for(
            lambda: any(e.data["metadata"].get("task_id") == "waits"
                        for e in events_of(airflow_node, "hami_refusals", EventKind.REFUSED)),
            240, "the first try of 'waits' to be refused",
        )
        cli(airflow_node, "release", blocker["id"], "--ledger", str(airflow_node.ledger_path))
        process.wait(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    airflow_node.timings["dags-test-refusals"] = time.monotonic() - started
    output = airflow_node.output("dags-test-refusals")
    states = airflow_node.task_instances("hami_refusals")
    # never fits: failed on its first try although it has retries; the codes are in the task's failure
    assert states["too_big"] == ("failed", 1), output[-4000:]
    assert "CardInsufficientMemory" in output and "never fits" in output
    refused = {e.data["metadata"]["task_id"]: e for e in events_of(airflow_node, "hami_refusals", EventKind.REFUSED)}
    assert refused["too_big"].data["permanent"] is True
    assert "CardInsufficientMemory" in refused["too_big"].data["counts"]
    assert refused["waits"].data["permanent"] is False and refused["waits"].data["metadata"]["try_number"] == "1"
    # the retry found the capacity the blocker freed, in the hami queue the task named
    state, tries = states["waits"]
    assert state == "success" and tries >= 2, output[-4000:]
    assert airflow_node.report("waits")["codes"] == [CUDA_SUCCESS]
    (granted,) = [e for e in events_of(airflow_node, "hami_refusals", EventKind.GRANTED)]
    assert granted.data["metadata"]["queue"] == "research" and granted.data["request"]["queue"] == "research"
    assert live_shares(airflow_node) == []


def test_a_killed_worker_leaves_its_share_to_gc(airflow_node: AirflowNode, shares_run: str) -> None:
    process = airflow_node.start("dags", "test", "hami_killed", log="dags-test-killed")
    try:
        wait_for(lambda: (airflow_node.reports / "hangs.json").exists(), 240, "the task process to allocate")
        task_process = airflow_node.report("hangs")["pid"]
        os.kill(process.pid, signal.SIGKILL)  # the worker running the task dies at once: no finally runs
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    wait_for(lambda: not pid_alive(task_process), 30, "the task process to die with its worker")
    (orphan,) = live_shares(airflow_node)
    assert orphan.metadata["task_id"] == "hangs"
    ledger = str(airflow_node.ledger_path)
    report = cli(airflow_node, "allocations", "gc", "--grace", "0", "--ledger", ledger, "--json")
    assert [a["target"] for a in report["actions"] if a["kind"] == "release" and a["done"]] == [orphan.id]
    assert live_shares(airflow_node) == []


def test_readme_decorator_runs_one_task_with_airflow_tasks_test(airflow_node: AirflowNode) -> None:
    readme = (REPO_ROOT / "docs" / "workflows.md").read_text()  # the quick start (moved from the README)
    block = readme.split("```python\n# dags/train.py")[1].split("```")[0]
    (airflow_node.folder / "dags" / "train.py").write_text("# dags/train.py" + block)
    output = airflow_node.run("tasks", "test", "train", "fine_tune", log="tasks-test-readme")
    assert "limit 4096m" in output and "visible GPU-" in output, output[-4000:]
    (granted,) = [e for e in events_of(airflow_node, "train", EventKind.GRANTED)]
    assert granted.data["metadata"]["task_id"] == "fine_tune"
    assert (granted.data["grants"][0]["memory_mib"], granted.data["grants"][0]["cores"]) == (4096, 30)
    assert live_shares(airflow_node) == []
