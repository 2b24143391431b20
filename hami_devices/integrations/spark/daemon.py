"""The Python daemon of a Spark executor, started under the executor's hami share.

Give it as ``spark.python.daemon.module``.  The executor's JVM starts it (the process
every Python worker of the executor is forked from) before the executor's first Python
task; it takes the share its parent executor holds (granted by the discovery script),
or grants it now (a standalone executor, whose resources came from its worker), then
re-executes itself as ``pyspark.daemon`` with the share's environment (visible devices,
limits, region, ``LD_PRELOAD`` of the limiter), so every task's Python worker runs under
the limiter.  When the share is refused, the daemon exits with the reason codes and the
executor's tasks fail with them: no task runs unlimited.
"""

from __future__ import annotations

import os
import sys

from hami_devices.errors import HamiError
from hami_devices.integrations.shares import NodeShares, environment_under, share_environment
from hami_devices.integrations.spark.executor import SHARE_VAR, Executor
from hami_devices.integrations.spark.share import ensure_share

DAEMON = "pyspark.daemon"


def environment() -> dict[str, str]:
    """This process's environment under its executor's share."""
    executor = Executor.parent()
    shares = NodeShares()
    try:
        handle = ensure_share(executor, shares)
    finally:
        shares.close()
    return environment_under(os.environ, share_environment(handle, SHARE_VAR))


def main() -> None:
    try:
        env = environment()
    except HamiError as exc:
        print(f"hami-devices: the Python daemon cannot start: {exc}", file=sys.stderr)
        sys.exit(1)
    os.execve(sys.executable, [sys.executable, "-m", DAEMON], env)


if __name__ == "__main__":
    main()
