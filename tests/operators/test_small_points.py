"""Issue 39, item 6's smaller points that are fixed in code (the others are answered in docs/operators.md)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices.cli.main import main
from hami_devices.errors import InvalidRequest
from hami_devices.ledger import SqliteLedger
from hami_devices.observability.usage import usage_report


def test_simulate_help_prints_percent_signs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = capsys.readouterr().out
    assert "130% of GPU capacity" in text and "%%" not in text


def test_the_airflow_task_process_is_not_imported_twice() -> None:
    done = subprocess.run([sys.executable, "-m", "hami_devices.integrations.airflow.child"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0  # no CALL and RESULT given
    assert "found in sys.modules" not in done.stderr and "unpredictable behaviour" not in done.stderr


def test_share_on_a_ray_remote_names_the_fix() -> None:
    import ray  # the [ray] extra, which scripts/test.sh installs: a missing Ray fails here, never skips

    from hami_devices.integrations import ray as hray

    @ray.remote
    def work() -> int:
        return 1

    with pytest.raises(InvalidRequest, match=r"work is a ray.remote already: use @hray.share"):
        hray.share(memory_mib=100)(work)


def test_usage_by_application_names_the_spark_application(tmp_path: Path) -> None:
    from hami_devices.integrations.spark import conf

    assert conf(memory_mib=100, application="etl-nightly")["spark.executorEnv.HAMI_SPARK_APP_NAME"] == "etl-nightly"
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("nodes:\n  - name: n1\n    devices:\n      - {vendor: nvidia, model: T4, count: 2}\n")
    ledger = SqliteLedger(tmp_path / "ledger.db")
    try:
        devices = hd.discover(inventory, ledger=ledger)
        named = {"spark_app": "app-20261204-0001", "spark_app_name": "etl-nightly"}
        for identity in (named, {**named, "spark_app": "app-20261204-0002"}, {"spark_app": "app-20261204-0003"}):
            hd.allocate(devices, {"parts": [{"count": 1, "memory_mib": 1000}]}, metadata=identity)
        report = usage_report(ledger, 0.0, time.time() + 60, "application")
    finally:
        ledger.close()
    # two runs of one named application are one row; an application that gave no name is shown by its id
    assert sorted((row.group, row.allocations) for row in report.rows) == [
        ("app-20261204-0003", 1), ("etl-nightly", 2),
    ]
