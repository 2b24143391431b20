"""Which Spark executor a process belongs to, and the id of the share that executor holds.

Spark runs an executor's resource discovery script (where the executor discovers its own
resources) and its Python daemon as children of the executor's JVM, so both find the
executor from their parent: its pid and
start time (so a reused pid is never taken for it) name the share, and its command
line gives the application id and the executor id.  A share whose executor is gone
is released by the next executor that starts on the node (``reap``), besides the
watcher each share has.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

from hami_devices.errors import InvalidRequest
from hami_devices.ledger import Ledger
from hami_devices.observability.procs import alive, start_time

PREFIX = "spark."
SHARE_SPEC_VAR = "HAMI_SPARK_SHARE"  # the share each executor asks for (JSON), set with spark.executorEnv
SHARE_VAR = "HAMI_SPARK_SHARE_ID"  # in the executor's Python workers: the allocation they run under
RESOURCE_VAR = "HAMI_SPARK_RESOURCE"  # the resource name the discovery script reports (default "gpu")
APP_NAME_VAR = "HAMI_SPARK_APP_NAME"  # the application's name (an executor is told only its id), from conf()


@dataclass(frozen=True)
class Executor:
    """One executor JVM: the process, and what its command line says it is."""

    pid: int
    started: int
    app_id: str
    executor_id: str

    @classmethod
    def of_process(cls, pid: int) -> Executor:
        started = start_time(pid)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            argv = []
        if started is None or not argv:
            raise InvalidRequest("executor", f"process {pid} is gone")
        args = [a.decode(errors="replace") for a in argv]
        options = dict(itertools.pairwise(args))
        if "--executor-id" not in options:
            raise InvalidRequest(
                "executor", f"process {pid} is not a Spark executor (no --executor-id): run this from Spark"
            )
        return cls(pid, started, options.get("--app-id", "unknown-app"), options["--executor-id"])

    @classmethod
    def parent(cls) -> Executor:
        return cls.of_process(os.getppid())

    @classmethod
    def parent_if_executor(cls) -> Executor | None:
        """The parent executor, or None when the parent is another process (a standalone worker)."""
        try:
            argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        return cls.parent() if b"--executor-id" in argv else None

    @property
    def share_id(self) -> str:
        return f"{PREFIX}{self.pid}-{self.started}.{self.app_id}.{self.executor_id}"

    @property
    def running(self) -> bool:
        return alive(self.pid, self.started)


def owner_of(share_id: str) -> tuple[int, int] | None:
    """The (pid, start time) of the executor a share id names, or None for another kind of share."""
    if not share_id.startswith(PREFIX):
        return None
    owner = share_id[len(PREFIX) :].partition(".")[0]
    pid, _, started = owner.partition("-")
    if not (pid.isdigit() and started.isdigit()):
        return None
    return int(pid), int(started)


def dead_executor_shares(ledger: Ledger) -> list[str]:
    """The Spark shares in ``ledger`` whose executor process is gone."""
    dead = []
    for handle in ledger.handles():
        owner = owner_of(handle.id)
        if owner is not None and not alive(*owner):
            dead.append(handle.id)
    return dead
