"""The command line, run as a user would run it (a separate process per call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "hami_devices.cli.main"]


def run(*args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}: {result.stderr}")
    return result


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json").stdout)


def test_every_verb_has_help() -> None:
    for verb in ["vendors", "discover", "allocate", "release", "monitor", "config", "schedule"]:
        assert "usage:" in run(verb, "--help").stdout


def test_vendors_lists_the_three_builtins() -> None:
    rows = {r["name"]: r for r in run_json("vendors")["vendors"]}
    assert {"nvidia", "ascend", "cambricon"} <= set(rows)
    assert all(rows[v]["loaded"] for v in ("nvidia", "ascend", "cambricon"))


def test_discover_inventory_lists_all_vendors(example_inventory: Path) -> None:
    devices = run_json("discover", "--inventory", str(example_inventory))["devices"]
    assert {d["vendor"] for d in devices} == {"nvidia", "ascend", "cambricon"}
    assert all(d["traits"] is not None for d in devices)
    table = run("discover", "--inventory", str(example_inventory)).stdout
    assert "H100" in table and "910B3" in table and "MLU370-X8" in table


def test_config_schema_and_validate(tmp_path: Path, example_inventory: Path) -> None:
    schema = json.loads(run("config", "schema").stdout)
    assert "device-plugin" in schema["properties"]
    good = example_inventory.parent / "config-multi-tenant.yaml"
    assert "valid" in run("config", "validate", str(good)).stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("device-plugin:\n  mig-mode: sometimes\n")
    result = run("config", "validate", str(bad), check=False)
    assert result.returncode == 2
    assert "device-plugin.mig-mode" in result.stderr and str(bad) in result.stderr


def test_allocate_monitor_release_through_a_durable_ledger(tmp_path: Path, example_inventory: Path) -> None:
    ledger = str(tmp_path / "ledger.db")
    common = ["--inventory", str(example_inventory), "--ledger", ledger]
    handle = run_json("allocate", *common, "--model", "T4", "--memory", "4096", "--cores", "30")
    grant = handle["grants"][0]
    assert grant["model"] == "T4" and grant["memory_mib"] == 4096
    (env,) = handle["environments"].values()
    assert env["CUDA_VISIBLE_DEVICES"] == grant["uuid"]

    metrics = run_json("monitor", *common, "--uuid", grant["uuid"])["metrics"]
    assert metrics[0]["allocated_memory_mib"] == 4096
    assert metrics[0]["allocations"][0]["handle_id"] == handle["id"]

    assert handle["id"] in run("release", handle["id"], "--ledger", ledger).stdout
    again = run("release", handle["id"], "--ledger", ledger, check=False)
    assert again.returncode == 2 and "UnknownAllocation" in again.stderr


def test_allocate_bad_request_is_a_typed_error(tmp_path: Path, example_inventory: Path) -> None:
    ledger = str(tmp_path / "ledger.db")
    result = run(
        "allocate", "--inventory", str(example_inventory), "--ledger", ledger,
        "--request", '{"parts": [{"count": 0}]}', check=False,
    )
    assert result.returncode == 2
    assert "InvalidRequest" in result.stderr and "parts.0.count" in result.stderr
    too_big = run("allocate", "--inventory", str(example_inventory), "--ledger", ledger,
                  "--model", "T4", "--memory", "999999", check=False)
    assert too_big.returncode == 2 and "CardInsufficientMemory" in too_big.stderr
    fraction = run("allocate", "--inventory", str(example_inventory), "--ledger", ledger,
                   "--model", "T4", "--memory", "1500m", check=False)
    assert fraction.returncode == 2 and "--memory" in fraction.stderr and "whole number" in fraction.stderr


def test_allocate_memory_is_read_as_kubernetes_reads_gpumem(tmp_path: Path, example_inventory: Path) -> None:
    common = ["--inventory", str(example_inventory), "--ledger", str(tmp_path / "ledger.db"), "--model", "T4"]
    assert run_json("allocate", *common, "--memory", "4k")["grants"][0]["memory_mib"] == 4000
    assert run_json("allocate", *common, "--memory", "4Ki")["grants"][0]["memory_mib"] == 4096
