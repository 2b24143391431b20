"""The engine-independent parts of the Airflow and Spark integrations, on a simulated node.

The share parser, the node's grants and refusals, the usage report's DAG/task/application
groupings, and ``hami-spark-discover`` run as a real process: as a standalone worker's
script, and as an executor's, under a parent whose command line is an executor's (the
Kubernetes path, which a local-cluster cannot take: its executors get their resources
from their workers).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import hami_devices as hd
from hami_devices.integrations.node import NodeSetup
from hami_devices.integrations.shares import NodeShares, ShareRefused, ShareSpec, environment_under
from hami_devices.integrations.spark import conf, discovery_script
from hami_devices.ledger import EventKind, SqliteLedger
from hami_devices.observability.usage import usage_report

ONE_T4 = {"nodes": [{"name": "w1", "devices": [{"vendor": "nvidia", "model": "T4", "count": 1}]}]}
T4_MIB = 15360  # the catalog's T4: the definition the simulated device is built from


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NodeSetup:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(ONE_T4))
    (tmp_path / "regions").mkdir()
    monkeypatch.setenv("HAMI_REGION_DIR", str(tmp_path / "regions"))
    return NodeSetup(ledger=tmp_path / "ledger.db", inventory=inventory)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"memory_mib": -1}, "hami.memory_mib"),
        ({"memory_mib": 1, "cores": 101}, "hami.cores"),
        ({"memory_mib": 1, "grant_timeout_s": -1}, "hami.grant_timeout_s"),
        ({"memory_mib": 1, "queue": ""}, "hami.queue"),
        ({"memory_mib": 1, "colour": "red"}, "hami.colour"),
        ("{not json", "hami"),
        (["T4"], "hami"),
    ],
)
def test_a_bad_share_names_its_field(value: object, field: str) -> None:
    with pytest.raises(hd.InvalidRequest) as raised:
        ShareSpec.parse(value, "hami")
    assert raised.value.field == field


def test_a_share_round_trips_through_json() -> None:
    spec = ShareSpec.parse({"models": ["T4"], "memory_mib": 4096, "cores": 30, "queue": "research"})
    assert ShareSpec.parse(spec.to_json()) == spec
    request = spec.request("dag/task")
    assert (request.queue, request.parts[0].memory_mib, request.parts[0].cores) == ("research", 4096, 30)


def test_the_limiter_is_preloaded_before_the_workloads_own_preload() -> None:
    merged = environment_under({"LD_PRELOAD": "/opt/theirs.so", "A": "1"}, {"LD_PRELOAD": "/hami/ours.so"})
    assert merged == {"LD_PRELOAD": "/hami/ours.so:/opt/theirs.so", "A": "1"}


def test_grants_carry_the_identity_and_refusals_the_codes(node: NodeSetup) -> None:
    shares = NodeShares(node)
    try:
        spec = ShareSpec.parse({"models": ["T4"], "memory_mib": 10240, "cores": 50, "queue": "research"})
        held = shares.grant(spec, name="etl/train", metadata={"dag_id": "etl", "task_id": "train"})
        assert held.metadata == {"queue": "research", "dag_id": "etl", "task_id": "train"}
        assert "LD_PRELOAD" in held.env and held.env["HAMI_DEVICE_MEMORY_LIMIT_0"] == "10240m"
        with pytest.raises(ShareRefused) as later:  # fits the T4, not beside the first share
            shares.grant(spec, name="etl/score", metadata={"dag_id": "etl", "task_id": "score"})
        assert later.value.permanent is False and "CardInsufficientMemory" in str(later.value)
        assert later.value.share == "etl/score" and later.value.node == "w1"
        too_big = ShareSpec.parse({"models": ["T4"], "memory_mib": T4_MIB + 1})
        with pytest.raises(ShareRefused) as never:
            shares.grant(too_big, name="etl/huge", metadata={})
        assert never.value.permanent is True
        assert shares.release(held.id) is True and shares.release(held.id) is False
        refused = [e.data["metadata"].get("task_id") for e in shares.ledger.events(kinds=[EventKind.REFUSED])]
        assert refused[:1] == ["score"]
    finally:
        shares.close()


def test_a_refusal_that_may_clear_is_retried_for_grant_timeout(node: NodeSetup) -> None:
    shares = NodeShares(node)
    try:
        blocker = shares.grant(ShareSpec.parse({"memory_mib": T4_MIB}), name="blocker", metadata={})
        patient = ShareSpec.parse({"memory_mib": 1024, "grant_timeout_s": 1.0})
        started = time.monotonic()
        with pytest.raises(ShareRefused):
            shares.grant(patient, name="patient", metadata={})
        assert time.monotonic() - started >= 1.0
        shares.release(blocker.id)
        assert shares.grant(patient, name="patient", metadata={}).grants[0].memory_mib == 1024
    finally:
        shares.close()


def test_usage_groups_by_dag_task_and_application(node: NodeSetup) -> None:
    ledger = hd.MemoryLedger()
    devices = node.devices(ledger)
    for metadata in (
        {"dag_id": "etl", "task_id": "train"},
        {"dag_id": "etl", "task_id": "score"},
        {"spark_app": "app-1"},
    ):
        hd.release(hd.allocate(devices, {"parts": [{"memory_mib": 1024}]}, metadata=metadata))
    now = time.time()
    groups = {by: {r.group for r in usage_report(ledger, 0, now + 1, by).rows} for by in ("dag", "task", "application")}
    assert groups == {
        "dag": {"etl", "(none)"},
        "task": {"etl/train", "etl/score", "(none)"},
        "application": {"app-1", "(none)"},
    }


def test_spark_conf_gives_every_executor_the_share() -> None:
    settings = conf(models=["T4"], memory_mib=4096, cores=40, task_amount=0.5, worker_slots=2)
    assert settings == {
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.resource.gpu.discoveryScript": discovery_script(),
        "spark.task.resource.gpu.amount": "0.5",
        "spark.executorEnv.HAMI_SPARK_SHARE": '{"cores": 40, "memory_mib": 4096, "models": ["T4"]}',
        "spark.python.daemon.module": "hami_devices.integrations.spark.daemon",
        "spark.worker.resource.gpu.amount": "2",
        "spark.worker.resource.gpu.discoveryScript": discovery_script(),
    }
    assert Path(discovery_script()).exists()
    with pytest.raises(hd.InvalidRequest, match=r"share\.cores"):
        conf(memory_mib=1, cores=101)


def test_the_documented_spark_submit_settings_are_what_conf_gives() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "workflows.md").read_text()
    block = doc[doc.index("spark-submit --master spark://") :]
    block = block[: block.index("```")]
    documented = dict(line.split("=", 1) for line in re.findall(r"--conf '?([^' ]+=[^\\]*?)'? \\\n", block))
    given = conf(models=["T4"], memory_mib=4096, cores=40, task_amount=0.5)
    script = "spark.executor.resource.gpu.discoveryScript"
    assert Path(documented.pop(script)).name == Path(given.pop(script)).name == "hami-spark-discover"
    assert documented.pop("spark.pyspark.python").endswith("/python")  # spark-submit's name for PYSPARK_PYTHON
    assert documented == given


def _discover_env(node: NodeSetup, share: dict[str, object]) -> dict[str, str]:
    return {**os.environ, **node.variables(), "HAMI_SPARK_SHARE": json.dumps(share)}


def test_discovery_by_a_standalone_worker_reports_the_node_share_slots(node: NodeSetup) -> None:
    run = subprocess.run(
        [discovery_script()], env=_discover_env(node, {"memory_mib": 4096}), capture_output=True, text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    split_count = hd.HamiConfig().device_plugin.split_count  # the default configuration's sharers per device
    assert json.loads(run.stdout) == {"name": "gpu", "addresses": [str(i) for i in range(split_count)]}


# A parent with an executor's command line, as Spark starts one: it runs the discovery script, prints what
# the script printed, and exits when told to (as an executor does when its application stops).
EXECUTOR = """
import json, pathlib, subprocess, sys, time
out = subprocess.run([sys.argv[1]], capture_output=True, text=True)
print(json.dumps([out.returncode, out.stdout, out.stderr]), flush=True)
while not pathlib.Path(sys.argv[2]).exists():
    time.sleep(0.05)
"""


def test_discovery_by_an_executor_grants_its_share_and_releases_it_when_it_exits(
    node: NodeSetup, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    executor = subprocess.Popen(
        [sys.executable, "-c", EXECUTOR, discovery_script(), str(stop),
         "--executor-id", "7", "--app-id", "app-20260101-0001"],
        env=_discover_env(node, {"models": ["T4"], "memory_mib": 4096, "cores": 40}),
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert executor.stdout is not None
        status, printed, errors = json.loads(executor.stdout.readline())
        assert status == 0, errors
        assert json.loads(printed) == {"name": "gpu", "addresses": ["0"]}
        ledger = SqliteLedger(node.ledger)
        (held,) = ledger.handles()
        assert held.id.startswith(f"spark.{executor.pid}-") and held.id.endswith(".app-20260101-0001.7")
        assert held.metadata["spark_app"] == "app-20260101-0001" and held.metadata["spark_executor"] == "7"
        assert (held.grants[0].memory_mib, held.grants[0].cores) == (4096, 40)
        stop.touch()
        executor.wait(timeout=60)
        deadline = time.monotonic() + 60
        while list(ledger.handles()):
            assert time.monotonic() < deadline, "the watcher did not release the share"
            time.sleep(0.1)
        (released,) = ledger.events(kinds=[EventKind.RELEASED])
        assert released.allocation_id == held.id and "exited" in released.data["reason"]
        ledger.close()
    finally:
        if executor.poll() is None:
            executor.kill()
            executor.wait()


def test_discovery_refused_exits_1_with_the_codes(node: NodeSetup) -> None:
    executor = subprocess.run(
        [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.run([sys.argv[1]]).returncode)",
         discovery_script(), "--executor-id", "1", "--app-id", "app-x"],
        env=_discover_env(node, {"models": ["T4"], "memory_mib": T4_MIB + 1}),
        capture_output=True, text=True, timeout=120,
    )
    assert executor.returncode == 1
    assert "ShareRefused" in executor.stderr and "CardInsufficientMemory" in executor.stderr
    assert list(SqliteLedger(node.ledger).handles()) == []
