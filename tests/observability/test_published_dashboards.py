"""Dashboards people already run -- HAMi's (its legacy names and today's) and NVIDIA's DCGM dashboard, as their
projects publish them (tests/observability/dashboards, see SOURCES.md) -- show data from the hami-devices
exporter: a real Prometheus scrapes it (with the shipped recording rules) on the fake NVML, while a real
workload runs under the limiter, and every query of every panel returns series."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hami_devices.limiter import fake_library
from hami_devices.observability import packaged
from tests.limiter.conftest import Drivers
from tests.observability.helpers import REPO, cli_env
from tests.observability.prometheus import Prometheus, prometheus
from tests.observability.test_prometheus import _run_json, running_exporter

pytestmark = pytest.mark.slow

DASHBOARDS = Path(__file__).with_name("dashboards")
FIXTURE = REPO / "vendors" / "nvidia" / "tests" / "fixtures" / "fields.conf"  # an H100, two T4s
GRAFANA_BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def _substituted(expr: str) -> str:
    """The query as Grafana sends it with every dashboard variable set to "All" (a regex matching anything)."""
    return _VARIABLE.sub(lambda m: GRAFANA_BUILTINS.get(m.group(1) or m.group(2), ".*"), expr)


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for panel in panels:
        found.append(panel)
        found.extend(_panels(panel.get("panels", [])))
    return found


def panel_queries(name: str) -> list[tuple[str, str]]:
    board = json.loads((DASHBOARDS / name).read_text())
    return [
        (panel.get("title") or "untitled", _substituted(target["expr"]))
        for panel in _panels(board["panels"])
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


def variable_queries(name: str) -> list[tuple[str, str, str]]:
    """(variable, series selector, label) of each ``label_values(selector, label)`` variable."""
    board = json.loads((DASHBOARDS / name).read_text())
    out = []
    for variable in board.get("templating", {}).get("list", []):
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        found = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", text)
        if variable.get("type") == "query" and found:
            out.append((variable["name"], _substituted(found.group(1)), found.group(2)))
    return out


@pytest.fixture
def node_env(tmp_path: Path, drivers: Drivers) -> dict[str, str]:
    return cli_env(
        HAMI_NVML_LIBRARY=str(fake_library("nvml/libnvidia-ml.so.1")),
        HAMI_FAKE_NVML_FIXTURE=str(FIXTURE),
        HAMI_FAKE_GPU_STATE=str(tmp_path / "gpu.state"),
        HAMI_FAKE_CUDA_DEVICES="3",
        HAMI_FAKE_MEMORY_MIB="81559,15360,15360",
        HAMI_REGION_DIR=str(tmp_path / "regions"),
        HAMI_LEDGER=str(tmp_path / "ledger.db"),
    )


def _returns_data(prom: Prometheus, title: str, expr: str) -> None:
    try:
        prom.wait_for(expr, timeout_s=30)
    except AssertionError as exc:
        raise AssertionError(f"panel {title!r} shows nothing: {expr}") from exc


@pytest.mark.parametrize(
    "dashboard", ["hami-gpu-dashboard-legacy.json", "hami-vgpu-dashboard.json", "dcgm-exporter-dashboard.json"]
)
def test_every_panel_of_a_published_dashboard_returns_data(
    dashboard: str, node_env: dict[str, str], drivers: Drivers, tmp_path: Path
) -> None:
    handle = _run_json(
        ["allocate", "--vendor", "nvidia", "--model", "H100", "--memory", "4096", "--cores", "30",
         "--meta", "pod=trainer-0", "--meta", "namespace=research", "--meta", "container=main", "--json"],
        node_env,
    )
    (grant,) = handle["grants"]
    workload_env = {**node_env, **handle["environments"][f"{grant['node']}/nvidia"]}
    workload_env.update(LD_LIBRARY_PATH=f"{drivers.fakes}/nvml:{drivers.fakes}",
                        HAMI_FAKE_CUDA_VISIBLE_DEVICES=str(grant["index"]))
    # kernels back to back under a 30 % compute share: the limiter measures (and publishes) its utilization
    workload = subprocess.Popen([str(drivers.cuda), "launch", "kernel", "2000", "300", "0"], env=workload_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        with running_exporter(node_env) as target, prometheus(tmp_path, target, [packaged("prometheus-rules.yml")]) \
                as prom:
            queries = panel_queries(dashboard)
            assert queries, "no panel queries found"
            for title, expr in queries:
                _returns_data(prom, title, expr)
            for name, selector, label in variable_queries(dashboard):
                series = prom.wait_for(selector)
                assert any(s["metric"].get(label) for s in series), f"variable {name}: no {label} on {selector}"
    finally:
        workload.send_signal(signal.SIGKILL)
        workload.wait()


def test_dcgm_series_carry_nvml_names_and_the_device_label(node_env: dict[str, str], tmp_path: Path) -> None:
    with running_exporter(node_env) as target, prometheus(tmp_path, target, [packaged("prometheus-rules.yml")]) \
            as prom:
        temps = prom.wait_for("DCGM_FI_DEV_GPU_TEMP", lambda r: len(r) == 3)
        labels = {s["metric"]["gpu"]: s["metric"] for s in temps}
        assert {k: (v["modelName"], v["device"]) for k, v in labels.items()} == {
            "0": ("NVIDIA H100 80GB HBM3", "nvidia0"), "1": ("Tesla T4", "nvidia1"), "2": ("Tesla T4", "nvidia2"),
        }
        # the fixture's figures, in DCGM's units
        (sm,) = prom.wait_for('DCGM_FI_DEV_SM_CLOCK{gpu="0"}')
        assert float(sm["value"][1]) == 1980
        (xid,) = prom.wait_for('DCGM_FI_DEV_XID_ERRORS{gpu="0"}')
        assert float(xid["value"][1]) == 31
        (tensor,) = prom.wait_for("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")  # the H100 only: Turing has no GPM
        assert tensor["metric"]["gpu"] == "0" and float(tensor["value"][1]) == 0.375
        assert prom.query('DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{gpu="2"}') == []  # a board that cannot say
        # counters exist from the start, at 0
        (released,) = prom.wait_for("hami_allocations_released_total")
        assert released["value"][1] == "0"
        refusals = prom.wait_for('hami_allocation_refusals_total{reason="CardInsufficientMemory"}')
        assert [r["value"][1] for r in refusals] == ["0"]
        (evicted,) = prom.wait_for('hami_lifecycle_events_total{kind="allocation.evicted"}')
        assert evicted["value"][1] == "0"
