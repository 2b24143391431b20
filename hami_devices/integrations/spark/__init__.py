"""Spark integration (the ``[spark]`` extra): each executor holds a hard share of one node's accelerator.

- ``hami-spark-discover`` (``discover.py``): the executor's resource discovery script;
  it grants the share through the node's ledger and starts the watcher (``watch.py``)
  that releases it when the executor exits;
- ``daemon.py``: the executor's Python daemon under the share's environment, so every
  task's Python worker runs under the limiter;
- ``conf(...)``: the Spark settings for one share per executor and a fractional task amount.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from hami_devices.integrations.shares import ShareSpec
from hami_devices.integrations.spark.executor import APP_NAME_VAR, RESOURCE_VAR, SHARE_SPEC_VAR, SHARE_VAR, Executor
from hami_devices.registry import path_variables

DISCOVERY_SCRIPT = "hami-spark-discover"
DAEMON_MODULE = "hami_devices.integrations.spark.daemon"

__all__ = ["DAEMON_MODULE", "DISCOVERY_SCRIPT", "SHARE_VAR", "Executor", "conf", "discovery_script"]


def discovery_script() -> str:
    """The path of ``hami-spark-discover`` installed beside this interpreter (else the one on PATH)."""
    beside = Path(sys.executable).parent / DISCOVERY_SCRIPT
    if beside.exists():
        return str(beside)
    return shutil.which(DISCOVERY_SCRIPT) or DISCOVERY_SCRIPT


def conf(
    *,
    task_amount: float = 1.0,
    resource: str = "gpu",
    worker_slots: int | None = None,
    application: str | None = None,
    **share: Any,
) -> dict[str, str]:
    """Spark settings giving every executor the share ``share`` asks for (request-part fields plus
    ``task_type``, ``queue``, ``grant_timeout_s``), its devices as the resource ``resource``, and each
    task ``task_amount`` of one (0.5: two tasks at a time on one device of the executor's share).

    ``application``: the application's name, kept with each share (``usage --by application`` groups by it;
    an executor is told only the application's id).  ``worker_slots`` adds the standalone workers' settings
    (the share slots each worker offers its executors), for a ``local-cluster`` whose workers take the
    application's configuration; a standalone cluster's workers read them from their own configuration."""
    spec = ShareSpec.parse(share, "share")
    settings = {
        f"spark.executor.resource.{resource}.amount": str(spec.part.count),
        f"spark.executor.resource.{resource}.discoveryScript": discovery_script(),
        f"spark.task.resource.{resource}.amount": f"{task_amount:g}",
        f"spark.executorEnv.{SHARE_SPEC_VAR}": spec.to_json(),
        "spark.python.daemon.module": DAEMON_MODULE,
    }
    if worker_slots is not None:
        settings[f"spark.worker.resource.{resource}.amount"] = str(worker_slots)
        settings[f"spark.worker.resource.{resource}.discoveryScript"] = discovery_script()
    if resource != "gpu":
        settings[f"spark.executorEnv.{RESOURCE_VAR}"] = resource
    if application:
        settings[f"spark.executorEnv.{APP_NAME_VAR}"] = application
    # executors run in work folders of their own: a relative library or fixture path is resolved here
    settings.update({f"spark.executorEnv.{k}": v for k, v in path_variables(os.environ).items()})
    return settings
