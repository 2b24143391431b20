"""A real Airflow for the Airflow tests: ``airflow dags test`` on a SQLite metadata database.

Airflow pins many dependencies, so it lives in a venv of its own, ``.venv-airflow``
(scripts/test.sh builds it with the project installed there too, editable); the tests
drive its ``airflow`` command.  Its processes inherit one simulated T4: the fake NVML
(discovery) and the fake libcuda by soname (the tasks' workloads), sharing one fake-GPU
state file, a private region folder and a fresh durable ledger.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hami_devices import limiter
from hami_devices.integrations.node import NodeSetup
from hami_devices.ledger import SqliteLedger
from tests.conftest import REPO_ROOT

HERE = Path(__file__).resolve().parent
VENV = REPO_ROOT / ".venv-airflow"
AIRFLOW = VENV / "bin" / "airflow"
PYTHON = VENV / "bin" / "python"
FIXTURE = REPO_ROOT / "tests" / "integrations" / "ray" / "fixtures" / "one-t4.conf"
FAKE_NVML = Path(limiter.fake_library("libcuda.so.1")).parent / "nvml" / "libnvidia-ml.so.1"
GPU_MIB = 15360
RUN_TIMEOUT_S = 420


@dataclass
class AirflowNode:
    folder: Path
    env: dict[str, str]
    reports: Path
    ledger_path: Path
    timings: dict[str, float] = field(default_factory=dict)

    def ledger(self) -> SqliteLedger:
        return SqliteLedger(self.ledger_path)

    def setup(self) -> NodeSetup:
        return NodeSetup.from_env(self.env)

    def start(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        out = (self.folder / f"{log}.log").open("wb")
        return subprocess.Popen(
            [str(AIRFLOW), *args], cwd=self.folder, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def run(self, *args: str, log: str) -> str:
        started = time.monotonic()
        process = self.start(*args, log=log)
        try:
            process.wait(timeout=RUN_TIMEOUT_S)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, 9)
                process.wait()
        self.timings[log] = time.monotonic() - started
        return self.output(log)

    def output(self, log: str) -> str:
        return (self.folder / f"{log}.log").read_text(errors="replace")

    def task_instances(self, dag_id: str) -> dict[str, tuple[str, int]]:
        """(state, try number) of each task of the DAG's latest run, from Airflow's own metadata database."""
        with sqlite3.connect(self.folder / "airflow.db") as db:
            rows = db.execute(
                "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = ? ORDER BY task_id", (dag_id,)
            ).fetchall()
        return {task: (state, tries) for task, state, tries in rows}

    def report(self, name: str) -> dict[str, Any]:
        import json

        data: dict[str, Any] = json.loads((self.reports / f"{name}.json").read_text())
        return data


@pytest.fixture(scope="module")
def airflow_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowNode]:
    assert AIRFLOW.exists(), "scripts/test.sh builds .venv-airflow (Airflow and the project) before the tests"
    folder = tmp_path_factory.mktemp("airflow")
    (folder / "regions").mkdir()
    (folder / "reports").mkdir()
    shutil.copytree(HERE / "dags", folder / "dags")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "HAMI_")) and k != "LD_PRELOAD"
    }
    env.update(
        {
            "PATH": f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(folder),
            "AIRFLOW__CORE__DAGS_FOLDER": str(folder / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{folder / 'airflow.db'}",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",
            "HAMI_NVML_LIBRARY": str(FAKE_NVML),
            "HAMI_FAKE_NVML_FIXTURE": str(FIXTURE),
            "HAMI_FAKE_GPU_STATE": str(folder / "fakegpu"),
            "HAMI_FAKE_MEMORY_MIB": str(GPU_MIB),
            "LD_LIBRARY_PATH": str(FAKE_NVML.parent.parent),
            "HAMI_REGION_DIR": str(folder / "regions"),
            "HAMI_LEDGER": str(folder / "ledger.db"),
            "HAMI_VENDORS": "nvidia",
            "HAMI_TEST_REPORTS": str(folder / "reports"),
            "HAMI_TEST_PYTHON": str(PYTHON),
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    node = AirflowNode(folder=folder, env=env, reports=folder / "reports", ledger_path=folder / "ledger.db")
    output = node.run("db", "migrate", log="db-migrate")
    assert "Database migrating done" in output or "done" in output.lower(), output[-3000:]
    yield node
    print(f"airflow timings (s): {node.timings}")
