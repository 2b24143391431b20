"""Airflow operators whose task process runs under a hard share of one of the worker node's accelerators.

``execute`` grants the share through the worker node's durable ledger (``hd.allocate``,
the node named by ``HAMI_*`` variables as for every integration) with the task
instance's identity as metadata, *then* starts the task's process with the share's
environment (visible devices, limits, region, ``LD_PRELOAD`` of the limiter), and
releases the share however the task ends: success, failure, timeout (Airflow raises in
``execute``) or kill (``on_kill``).  The task's processes are stopped before the
release, so no workload outlives its share.  If the worker itself is killed, the task
process dies with it and ``hami-devices allocations gc`` releases the share.

A refusal fails the try with ``ShareRefused`` (the reason codes in its message and in
the ledger's ``allocation.refused`` event): Airflow retries it after ``retry_delay`` if
the task has retries left, so a retry waits for capacity; a share that can never fit
this node fails with ``AirflowFailException`` and is not retried.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cloudpickle
import psutil
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk.exceptions import AirflowFailException

from hami_devices.errors import HamiError
from hami_devices.integrations.airflow.variables import PARENT_VAR
from hami_devices.integrations.shares import NodeShares, ShareRefused, ShareSpec, environment_under, share_environment

SHARE_VAR = "HAMI_AIRFLOW_SHARE"  # in the task's processes: the id of the allocation they run under
STOP_GRACE_S = 5.0


class TaskProcessFailed(HamiError):
    """The task's process under its share failed (its exception, or the signal that killed it)."""


def task_identity(context: Mapping[str, Any]) -> dict[str, str]:
    """The metadata a task instance's share carries: workload, dag_id, task_id, run_id, try_number, ..."""
    ti = context["ti"]
    identity = {
        "workload": f"{ti.dag_id}/{ti.task_id}",
        "dag_id": str(ti.dag_id),
        "task_id": str(ti.task_id),
        "run_id": str(ti.run_id),
        "try_number": str(ti.try_number),
    }
    if getattr(ti, "map_index", -1) not in (None, -1):
        identity["map_index"] = str(ti.map_index)
    task = context.get("task")
    if task is not None and getattr(task, "owner", None):
        identity["owner"] = str(task.owner)
    return identity


def stop_processes(share_id: str) -> int:
    """Stop this process's descendants that run under ``share_id``: SIGTERM, then SIGKILL after a grace."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.environ().get(SHARE_VAR) == share_id:
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for process in found:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(found, timeout=STOP_GRACE_S)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=STOP_GRACE_S)
    return len(found)


class ShareMixin:
    """Grant before the task's process starts, inject, release after; mixed into an Airflow operator."""

    hami: dict[str, Any]
    log: Any

    def _share_init(self, hami: Mapping[str, Any]) -> None:
        # Validated when the DAG file is parsed: a bad field is an import error naming it.
        self.hami = ShareSpec.parse(hami, "hami").to_dict()
        self.share_environment: dict[str, str] = {}

    def execute(self, context: Any) -> Any:
        spec = ShareSpec.parse(self.hami, "hami")
        identity = task_identity(context)
        shares = NodeShares()
        try:
            try:
                handle = shares.grant(spec, name=identity["workload"], metadata=identity)
            except ShareRefused as refused:
                if refused.permanent:
                    raise AirflowFailException(str(refused)) from refused
                raise
            self.share_environment = share_environment(handle, SHARE_VAR)
            self.log.info("hami: granted %s on node %s: %s", handle.id, shares.node_name(), _grants(handle.grants))
            try:
                return super().execute(context)  # type: ignore[misc]
            finally:
                stopped = stop_processes(handle.id)
                released = shares.release(handle.id, reason=f"airflow: {identity['workload']} ended")
                self.log.info(
                    "hami: %s %s%s",
                    "released" if released else "already released:",
                    handle.id,
                    f" (stopped {stopped} task process(es))" if stopped else "",
                )
        finally:
            shares.close()

    def on_kill(self) -> None:
        share = self.share_environment.get(SHARE_VAR)
        if share:
            stop_processes(share)
        super().on_kill()  # type: ignore[misc]


def _grants(grants: Any) -> list[str]:
    return [f"{g.model} {g.uuid} {g.memory_mib} MiB {g.cores} %" for g in grants]


class HamiPythonOperator(ShareMixin, PythonOperator):  # type: ignore[misc]
    """A Python callable run in its own process under a share: ``hami={"models": ["T4"], "memory_mib": ...}``.

    The callable and its arguments travel to the task process pickled by value
    (cloudpickle), so it may use the DAG file's imports and helpers; its return value
    comes back as the task's XCom.  Context values it asks for must pickle.
    """

    def __init__(self, *, hami: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._share_init(hami)

    def execute_callable(self) -> Any:
        with tempfile.TemporaryDirectory(prefix="hami-airflow-") as folder:
            call, result = Path(folder, "call.pkl"), Path(folder, "result.pkl")
            call.write_bytes(_pickled_call(self.python_callable, self.op_args, self.op_kwargs))
            env = {
                **environment_under(os.environ, self.share_environment),
                PARENT_VAR: str(os.getpid()),
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),  # the DAG folder and plugins too
            }
            command = [sys.executable, "-m", "hami_devices.integrations.airflow.child", str(call), str(result)]
            process = subprocess.Popen(command, env=env, start_new_session=True)
            try:
                status = process.wait()
            finally:
                if process.poll() is None:  # the wait was interrupted: a timeout, a kill
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            if status != 0:
                error = result.with_suffix(".error")
                raise TaskProcessFailed(
                    error.read_text() if error.exists() else f"the task process ended with status {_status(status)}"
                )
            return cloudpickle.loads(result.read_bytes()) if result.exists() else None


class HamiBashOperator(ShareMixin, BashOperator):  # type: ignore[misc]
    """A bash command run under a share: ``HamiBashOperator(task_id=..., bash_command=..., hami={...})``."""

    def __init__(self, *, hami: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._share_init(hami)

    def get_env(self, context: Any) -> dict[str, str]:
        return environment_under(super().get_env(context), self.share_environment)


def _pickled_call(function: Any, args: Any, kwargs: Mapping[str, Any]) -> bytes:
    """The callable and its arguments, the DAG file's module pickled by value (it is not importable elsewhere)."""
    module = sys.modules.get(getattr(function, "__module__", "") or "")
    # A DAG file is loaded under a name of Airflow's making (no import finds it): its code travels by value.
    by_value = module is not None and module.__name__ != "__main__" and not _importable(module.__name__)
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        return bytes(cloudpickle.dumps((function, tuple(args), dict(kwargs))))
    except Exception as exc:
        raise TaskProcessFailed(f"the task's callable or arguments do not pickle: {exc}") from exc
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)


def _importable(name: str) -> bool:
    """Whether an import of ``name`` finds it on the path (not merely in ``sys.modules``)."""
    top = name.partition(".")[0]
    return top in sys.builtin_module_names or importlib.machinery.PathFinder.find_spec(top) is not None


def _status(status: int) -> str:
    return f"{status}" if status >= 0 else f"{status} (killed by {signal.Signals(-status).name})"
