"""The share one Spark executor holds: granted once (by whichever of the executor's processes comes
first: its discovery script, or its Python daemon), watched, and released when the executor exits."""

from __future__ import annotations

import os
import subprocess
import sys

from hami_devices.errors import UnknownAllocation
from hami_devices.integrations.shares import NodeShares, ShareSpec
from hami_devices.integrations.spark.executor import APP_NAME_VAR, SHARE_SPEC_VAR, Executor, dead_executor_shares
from hami_devices.models import DeviceHandle


def ensure_share(executor: Executor, shares: NodeShares) -> DeviceHandle:
    """The executor's share: the one it holds, or a new one granted as ``HAMI_SPARK_SHARE`` asks, with the
    application and executor ids as metadata, and a watcher that releases it when the executor exits."""
    try:
        return shares.ledger.get(executor.share_id)
    except UnknownAllocation:
        pass
    spec = ShareSpec.parse(os.environ.get(SHARE_SPEC_VAR) or "", SHARE_SPEC_VAR)
    for gone in dead_executor_shares(shares.ledger):  # a watcher that died before its executor
        shares.release(gone, reason="spark: executor process gone")
    metadata = {
        "workload": f"spark/{executor.app_id}",
        "spark_app": executor.app_id,
        "spark_executor": executor.executor_id,
    }
    if os.environ.get(APP_NAME_VAR):
        metadata["spark_app_name"] = os.environ[APP_NAME_VAR]
    handle = shares.grant(
        spec, name=f"spark/{executor.app_id}/{executor.executor_id}", metadata=metadata, handle_id=executor.share_id
    )
    watch(executor)
    return handle


def watch(executor: Executor) -> None:
    """Start the detached watcher (no inherited output: Spark waits for a discovery script's output to close)."""
    subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hami_devices.integrations.spark.watch",
            executor.share_id,
            str(executor.pid),
            str(executor.started),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
