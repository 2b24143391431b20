"""Checkpoint and restore: how a workload that allows it is moved without losing its work.

A move (a defragmentation's, or an eviction the queues make) releases a task's
share and allocates it elsewhere.  A task that cannot be checkpointed is
stopped and started again from scratch there: its work so far is lost.  A task
whose hook says it is checkpointable is asked to save its state first, and is
started again from that state on its new devices: it loses only what it did
between the checkpoint and the stop (nothing, when it saves on demand).

``CheckpointHook`` is what a node agent implements; ``ProcessCheckpointer``
is one for plain processes that save their own state: on ``SIGTERM`` the
process writes its state to the file named by ``HAMI_CHECKPOINT_PATH`` and
exits 0; started again with ``HAMI_RESTORE_FROM`` set to that file, it
resumes from it.  Real GPU state plugs in behind the same two calls:
``cuda-checkpoint --toggle --pid P`` moves the process's device memory and
CUDA contexts into host memory, ``criu dump`` writes the process to an image,
and on the new devices ``criu restore`` then ``cuda-checkpoint --toggle``
bring it back (the image, not the process, carries the state; see the README).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hami_devices.errors import HamiError, InvalidRequest

CHECKPOINT_ENV = "HAMI_CHECKPOINT_PATH"
RESTORE_ENV = "HAMI_RESTORE_FROM"


class CheckpointHook(Protocol):
    def checkpointable(self, task: str) -> bool:
        """Whether ``task`` can be checkpointed now."""
        ...

    def checkpoint(self, task: str) -> str:
        """Save ``task``'s state and stop it; returns where the state is."""
        ...

    def restore(self, task: str, state: str, environment: Mapping[str, str]) -> None:
        """Start ``task`` again from ``state``, with its new share's ``environment``."""
        ...


@dataclass
class _Workload:
    argv: list[str]
    state: Path
    process: subprocess.Popen[bytes]
    checkpointable: bool


@dataclass
class ProcessCheckpointer:
    """Plain processes that save their state on SIGTERM (see the module doc)."""

    folder: Path
    timeout_s: float = 30.0
    workloads: dict[str, _Workload] = field(default_factory=dict)

    def start(
        self,
        task: str,
        argv: Sequence[str],
        environment: Mapping[str, str] | None = None,
        *,
        checkpointable: bool = True,
        restore_from: str | None = None,
    ) -> subprocess.Popen[bytes]:
        if not argv:
            raise InvalidRequest("argv", "a workload needs a command")
        state = Path(self.folder) / f"{task}.state"
        env = {**os.environ, **(environment or {}), CHECKPOINT_ENV: str(state)}
        env.pop(RESTORE_ENV, None)
        if restore_from is not None:
            env[RESTORE_ENV] = restore_from
        process = subprocess.Popen(list(argv), env=env)
        self.workloads[task] = _Workload(list(argv), state, process, checkpointable)
        return process

    def _workload(self, task: str) -> _Workload:
        try:
            return self.workloads[task]
        except KeyError:
            raise InvalidRequest("task", f"no workload {task!r} was started here") from None

    def checkpointable(self, task: str) -> bool:
        w = self.workloads.get(task)
        return w is not None and w.checkpointable and w.process.poll() is None

    def checkpoint(self, task: str) -> str:
        w = self._workload(task)
        w.process.send_signal(signal.SIGTERM)
        try:
            code = w.process.wait(self.timeout_s)
        except subprocess.TimeoutExpired:
            w.process.kill()
            w.process.wait()
            raise HamiError(f"task {task!r} did not checkpoint within {self.timeout_s:g} s; it was killed") from None
        if code != 0 or not w.state.exists():
            raise HamiError(f"task {task!r} exited {code} without writing its state to {w.state}")
        return str(w.state)

    def restore(self, task: str, state: str, environment: Mapping[str, str]) -> None:
        w = self._workload(task)
        self.start(task, w.argv, environment, checkpointable=w.checkpointable, restore_from=state)

    def stop(self, task: str) -> None:
        """Kill ``task`` (a move without a checkpoint: its work is lost)."""
        w = self._workload(task)
        if w.process.poll() is None:
            w.process.kill()
            w.process.wait()

    def restart(self, task: str, environment: Mapping[str, str]) -> None:
        """Start ``task`` again from scratch."""
        w = self._workload(task)
        self.start(task, w.argv, environment, checkpointable=w.checkpointable)


def wait_for(path: Path, timeout_s: float = 10.0) -> None:
    """Until ``path`` exists (a workload's readiness file); raises ``HamiError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise HamiError(f"{path} did not appear within {timeout_s:g} s")
        time.sleep(0.02)
