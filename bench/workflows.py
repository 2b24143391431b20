"""What the Airflow and Spark integrations cost, next to the engines' own start-up: one JSON object.

Airflow (from ``.venv-airflow``, which scripts/test.sh builds): the CLI's start, ``airflow db migrate`` on
SQLite, and ``airflow tasks test`` of one task as a plain ``@task`` and as a ``@hami.task`` (the grant, the
task's own process under the limiter, the release). Spark (PySpark from this venv, the machine's Java): a
``local-cluster[2,1,1024]`` session and its first job, with and without the hami settings. Both on one
simulated T4 (the fake NVML and libcuda). Run from the repository root: ``python bench/workflows.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hami_devices import limiter

REPO = Path(__file__).resolve().parent.parent
AIRFLOW = REPO / ".venv-airflow" / "bin" / "airflow"
FAKE_NVML = Path(limiter.fake_library("libcuda.so.1")).parent / "nvml" / "libnvidia-ml.so.1"
FIXTURE = REPO / "tests" / "integrations" / "ray" / "fixtures" / "one-t4.conf"

DAG = """
from airflow.sdk import DAG, task
from hami_devices.integrations import airflow as hami

def work():
    return sum(range(1000))

with DAG("bench", schedule=None):
    task(task_id="plain")(work)()
    hami.task(models=["T4"], memory_mib=1024, cores=30, task_id="shared")(work)()
"""


def node_env(folder: Path) -> dict[str, str]:
    (folder / "regions").mkdir(parents=True, exist_ok=True)
    return {
        "HAMI_NVML_LIBRARY": str(FAKE_NVML),
        "HAMI_FAKE_NVML_FIXTURE": str(FIXTURE),
        "HAMI_FAKE_GPU_STATE": str(folder / "fakegpu"),
        "LD_LIBRARY_PATH": str(FAKE_NVML.parent.parent),
        "HAMI_REGION_DIR": str(folder / "regions"),
        "HAMI_LEDGER": str(folder / "ledger.db"),
        "HAMI_VENDORS": "nvidia",
    }


def timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.monotonic()
    run = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return round(time.monotonic() - started, 2)


def airflow_figures(folder: Path) -> dict[str, float]:
    (folder / "dags").mkdir(parents=True)
    (folder / "dags" / "bench.py").write_text(DAG)
    env = {
        **os.environ,
        **node_env(folder),
        "AIRFLOW_HOME": str(folder),
        "AIRFLOW__CORE__DAGS_FOLDER": str(folder / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{folder / 'airflow.db'}",
    }
    return {
        "cli_start_s": timed([str(AIRFLOW), "version"], env, folder),
        "db_migrate_s": timed([str(AIRFLOW), "db", "migrate"], env, folder),
        "tasks_test_plain_s": timed([str(AIRFLOW), "tasks", "test", "bench", "plain"], env, folder),
        "tasks_test_hami_s": timed([str(AIRFLOW), "tasks", "test", "bench", "shared"], env, folder),
    }


def spark_run(settings: dict[str, str]) -> dict[str, float]:
    from pyspark.sql import SparkSession

    started = time.monotonic()
    builder = SparkSession.builder.master("local-cluster[2,1,1024]").appName("hami-bench")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    session = time.monotonic()
    spark.sparkContext.parallelize(range(8), 4).map(lambda x: x * x).sum()
    job = time.monotonic()
    spark.stop()
    return {
        "session_s": round(session - started, 2),
        "first_job_s": round(job - session, 2),
        "stop_s": round(time.monotonic() - job, 2),
    }


def spark_figures(folder: Path) -> dict[str, Any]:
    """Each run in a fresh driver process, so each pays for its own JVM."""
    env = {**os.environ, **node_env(folder), "PYSPARK_PYTHON": sys.executable}
    figures = {}
    for kind in ("plain", "hami"):
        run = subprocess.run(
            [sys.executable, __file__, "--spark-run", kind], env=env, capture_output=True, text=True, timeout=900
        )
        if run.returncode != 0:
            raise SystemExit(f"the {kind} Spark run failed:\n{run.stderr[-3000:]}")
        figures[kind] = json.loads(run.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["airflow", "spark"], help="measure one engine")
    parser.add_argument("--spark-run", choices=["plain", "hami"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.spark_run:
        from hami_devices.integrations import spark as hspark

        share = dict(models=["T4"], memory_mib=4096, cores=40, task_amount=0.5, worker_slots=2)
        print(json.dumps(spark_run(hspark.conf(**share) if args.spark_run == "hami" else {})))
        return
    figures: dict[str, Any] = {"load_average_1m": os.getloadavg()[0], "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="hami-bench-workflows-") as tmp:
        if args.only in (None, "airflow"):
            figures["airflow"] = airflow_figures(Path(tmp, "airflow"))
        if args.only in (None, "spark"):
            figures["spark"] = spark_figures(Path(tmp, "spark"))
    json.dump(figures, sys.stdout)
    print()


if __name__ == "__main__":
    main()
