"""The task process of a ``@hami.task``: ``python -m hami_devices.integrations.airflow.child CALL RESULT``.

The operator starts it under the share's environment (the limiter preloaded, the
region, the limits), so the limiter is in place before the task's code runs.  It
dies with the Airflow process that started it (``PR_SET_PDEATHSIG``): a killed
worker leaves no workload running, and ``hami-devices allocations gc`` can reclaim
the share.  CALL holds the pickled callable and its arguments; the return value is
pickled into RESULT.  It imports no Airflow.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback
from pathlib import Path

import cloudpickle

from hami_devices.integrations.airflow.variables import PARENT_VAR

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    parent = os.environ.get(PARENT_VAR)
    if parent and os.getppid() != int(parent):  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    die_with_parent()
    call, result = Path(argv[0]), Path(argv[1])
    function, args, kwargs = cloudpickle.loads(call.read_bytes())
    try:
        value = function(*args, **kwargs)
    except BaseException as exc:
        traceback.print_exc()
        result.with_suffix(".error").write_text(f"{type(exc).__name__}: {exc}")
        return 1
    result.write_bytes(cloudpickle.dumps(value))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
