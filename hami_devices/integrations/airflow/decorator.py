"""``@hami.task(models=["T4"], memory_mib=4096, cores=30)``: a TaskFlow task that runs under its own share.

The share's keys are every request-part field (``count``, ``memory_mib``,
``memory_percent``, ``cores``, ``models``, ``vendors``, ...) plus ``task_type``,
``grant_timeout_s`` and ``hami_queue`` (the hami queue the share is counted in;
Airflow's own ``queue`` and ``pool`` keep their meaning).  Every other keyword is
the task's, as for ``@task`` (``retries``, ``retry_delay``, ``execution_timeout``,
``pool``, ``task_id``, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.providers.standard.decorators.python import _PythonDecoratedOperator
from airflow.sdk.bases.decorator import task_decorator_factory

from hami_devices.integrations.airflow.operators import HamiPythonOperator
from hami_devices.models import RequestPart

SHARE_KEYS = (set(RequestPart.model_fields) - {"name"}) | {"task_type", "grant_timeout_s"}
QUEUE_KEY = "hami_queue"


class HamiDecoratedOperator(_PythonDecoratedOperator, HamiPythonOperator):  # type: ignore[misc]
    """What ``@hami.task`` builds: Airflow's decorated Python operator, run under a share."""

    custom_operator_name = "@hami.task"


def task(
    python_callable: Callable[..., Any] | None = None, *, multiple_outputs: bool | None = None, **kwargs: Any
) -> Any:
    """Decorate a function into an Airflow task whose process runs under a hard share of one accelerator."""
    share = {key: kwargs.pop(key) for key in list(kwargs) if key in SHARE_KEYS}
    if QUEUE_KEY in kwargs:
        share["queue"] = kwargs.pop(QUEUE_KEY)
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=HamiDecoratedOperator,
        hami=share,
        **kwargs,
    )
