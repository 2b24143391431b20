"""``python -m hami_devices.integrations.spark.watch SHARE PID START``: release SHARE when the executor exits.

The discovery script starts one per share, detached from the executor (its own
session, no inherited output), so that Spark's wait for the script's output does not
wait for it and stopping the executor does not stop it.  It waits on a pidfd, so it
costs nothing while the executor runs.
"""

from __future__ import annotations

import logging
import os
import select
import sys

from hami_devices.integrations.shares import NodeShares
from hami_devices.observability.procs import alive

log = logging.getLogger("hami_devices.integrations.spark")


def wait_for_exit(pid: int, started: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if alive(pid, started):  # the pidfd is of the executor, not of a process that reused its pid
            select.select([fd], [], [])
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    share_id, pid, started = argv[0], int(argv[1]), int(argv[2])
    wait_for_exit(pid, started)
    shares = NodeShares()
    try:
        released = shares.release(share_id, reason=f"spark: executor process {pid} exited")
    finally:
        shares.close()
    log.info("hami: %s %s", "released" if released else "already released:", share_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
