"""Airflow integration (the ``[airflow]`` extra): each task's process under a hard share of one accelerator.

- ``task(...)``: ``@hami.task(models=["T4"], memory_mib=4096, cores=30)``, a TaskFlow task;
- ``HamiPythonOperator`` / ``HamiBashOperator``: the same for a callable or a bash command, ``hami={...}``;
- ``ShareRefused``: why the worker node could not grant a share (the SDK's reason codes).

The worker node's devices and ledger are named by the ``HAMI_*`` variables of its
environment (``hami_devices.integrations.node``).
"""

from __future__ import annotations

from hami_devices.integrations.airflow.decorator import HamiDecoratedOperator, task
from hami_devices.integrations.airflow.operators import (
    SHARE_VAR,
    HamiBashOperator,
    HamiPythonOperator,
    TaskProcessFailed,
    task_identity,
)
from hami_devices.integrations.shares import ShareRefused

__all__ = [
    "SHARE_VAR",
    "HamiBashOperator",
    "HamiDecoratedOperator",
    "HamiPythonOperator",
    "ShareRefused",
    "TaskProcessFailed",
    "task",
    "task_identity",
]
