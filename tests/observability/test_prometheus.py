"""End to end: a real Prometheus scrapes the exporter running on the fake NVML, while a real workload
process holds memory under the limiter; PromQL finds the workload's memory joined to its device and pod.
Then ``events`` and ``usage`` report on the ledger that run filled."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from hami_devices.ledger import EventKind, SqliteLedger
from hami_devices.limiter import fake_library
from hami_devices.observability import packaged
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import FAKE_CONTEXT_MIB
from tests.observability.helpers import CLI, REPO, cli_env
from tests.observability.prometheus import prometheus
from tests.observability.test_dashboard import dashboard_queries

MIB = 1 << 20
RULES = [packaged("prometheus-rules.yml")]
FIXTURE = REPO / "vendors" / "nvidia" / "tests" / "fixtures" / "t4-pcie.conf"


def _wait_for_event(ledger_path: Path, allocation_id: str, kind: str, timeout_s: float = 30.0) -> None:
    """The exporter's observer records it on its next pass."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ledger = SqliteLedger(ledger_path)
        found = ledger.events(allocation_id=allocation_id, kinds=[kind])
        ledger.close()
        if found:
            return
        time.sleep(0.2)
    raise AssertionError(f"no {kind} event for {allocation_id}")


def _run_json(args: list[str], env: dict[str, str]) -> Any:
    done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


@pytest.fixture
def node_env(tmp_path: Path, drivers: Drivers) -> dict[str, str]:
    """One machine's view: the fake NVML on a 4 x T4 fixture sharing its state with the fake CUDA runtime."""
    return cli_env(
        HAMI_NVML_LIBRARY=str(fake_library("nvml/libnvidia-ml.so.1")),
        HAMI_FAKE_NVML_FIXTURE=str(FIXTURE),
        HAMI_FAKE_GPU_STATE=str(tmp_path / "gpu.state"),
        HAMI_FAKE_CUDA_DEVICES="4",
        HAMI_FAKE_MEMORY_MIB="15360",
        HAMI_REGION_DIR=str(tmp_path / "regions"),
        HAMI_LEDGER=str(tmp_path / "ledger.db"),
    )


@contextmanager
def running_exporter(node_env: dict[str, str]) -> Iterator[str]:
    """``hami-devices exporter`` on a free loopback port; yields its HOST:PORT."""
    proc = subprocess.Popen(
        [*CLI, "exporter", "--vendor", "nvidia", "--listen", "127.0.0.1:0", "--observe-interval", "0.5",
         "--timeout", "2"],
        env=node_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"http://(127\.0\.0\.1:\d+)/metrics", line)
    if not found:
        proc.kill()
        pytest.fail(f"the exporter did not start: {line}{proc.stderr.read()}")
    try:
        yield found.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, proc.stderr.read()


def test_prometheus_joins_workload_memory_to_its_device_and_pod(
    node_env: dict[str, str], drivers: Drivers, tmp_path: Path
) -> None:
    handle = _run_json(
        ["allocate", "--vendor", "nvidia", "--memory", "64", "--cores", "30", "--meta", "pod=web-0",
         "--meta", "namespace=prod", "--meta", "container=main", "--meta", "owner=ana", "--json"],
        node_env,
    )
    (grant,) = handle["grants"]
    uuid, index = grant["uuid"], grant["index"]
    workload_env = {**node_env, **handle["environments"][f"{grant['node']}/nvidia"]}
    workload_env.update(LD_LIBRARY_PATH=str(drivers.fakes), HAMI_FAKE_CUDA_VISIBLE_DEVICES=str(index))
    holder = subprocess.Popen([str(drivers.cuda), "hold", str(24 * MIB)], env=workload_env,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "READY rc=0"
    try:
        with running_exporter(node_env) as target, prometheus(tmp_path, target, RULES) as prom:
            joined = prom.wait_for(
                'hami_device_memory_used_bytes * on (uuid) group_right hami_allocation_info{pod="web-0"}'
            )
            (series,) = joined
            labels = series["metric"]
            assert labels["uuid"] == uuid and labels["pod"] == "web-0" and labels["namespace"] == "prod"
            assert labels["pci_bus_id"] == "0000:3B:00.0" or labels["pci_bus_id"].lower().endswith("3b:00.0")
            # the vendor library's reading of that device: the 24 MiB and the process's context beside them
            assert float(series["value"][1]) == (24 + FAKE_CONTEXT_MIB) * MIB

            (share,) = prom.wait_for('hami_allocation_memory_used_bytes{pod="web-0", container="main"}')
            assert float(share["value"][1]) == 24 * MIB and share["metric"]["uuid"] == uuid  # the limiter's
            (limit,) = prom.query('hami_allocation_memory_limit_bytes{pod="web-0"}')
            assert float(limit["value"][1]) == 64 * MIB
            (cores,) = prom.query('hami_allocation_cores_limit_ratio{pod="web-0"}')
            assert float(cores["value"][1]) == 0.3
            (up,) = prom.query('hami_exporter_collector_up{collector="nvidia"}')
            assert up["value"][1] == "1"
            assert prom.query('hami_device_power_watts{device_index="0"}')[0]["value"][1] == "25"

            # The recording rules give the field's names: DCGM's and HAMi's.
            (fb,) = prom.wait_for(f'DCGM_FI_DEV_FB_USED{{UUID="{uuid}"}}')
            assert float(fb["value"][1]) == 24 + FAKE_CONTEXT_MIB and fb["metric"]["gpu"] == str(index)
            (vgpu,) = prom.wait_for(f'hami_vgpu_memory_used_bytes{{device_uuid="{uuid}", pod="web-0"}}')
            assert float(vgpu["value"][1]) == 24 * MIB

            for _title, expr in dashboard_queries():  # every panel's query is valid PromQL on live data
                prom.query(expr)
            (used_panel,) = [e for t, e in dashboard_queries() if t == "Device memory used by workload"]
            assert prom.query(used_panel), "the dashboard's main panel shows nothing"

            holder.send_signal(signal.SIGKILL)
            holder.wait()
            prom.wait_for('hami_allocation_processes{pod="web-0"} == 0')
            _wait_for_event(Path(node_env["HAMI_LEDGER"]), handle["id"], EventKind.PROCESS_EXITED)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()

    _run_json(["release", handle["id"], "--json"], node_env)
    events = _run_json(["events", "--allocation", handle["id"], "--json"], node_env)["events"]
    assert [e["kind"] for e in events] == [
        "allocation.granted", "process.started", "process.exited", "allocation.released",
    ]
    assert events[1]["data"]["pid"] == holder.pid and events[1]["data"]["metadata"]["pod"] == "web-0"
    report = _run_json(["usage", "--from", "1h", "--by", "owner", "--json"], node_env)
    (row,) = report["rows"]
    assert (row["group"], row["vendor"], row["model"], row["allocations"]) == ("ana", "nvidia", "T4", 1)
    assert row["device_hours"] > 0
    assert row["core_share_hours"] == pytest.approx(0.3 * row["device_hours"], rel=1e-3)
    assert row["memory_share_hours"] == pytest.approx(64 / 15360 * row["device_hours"], rel=1e-3)
    assert 0 < row["sampled_hours"] <= row["device_hours"] + 1e-6
    assert 0 < row["used_memory_share_hours"] <= 24 / 15360 * row["sampled_hours"] + 1e-9
