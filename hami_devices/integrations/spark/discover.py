"""``hami-spark-discover``: the resource discovery script of Spark executors and standalone workers.

- **Run by an executor** (``spark.executor.resource.gpu.discoveryScript``; Kubernetes and
  YARN executors discover their own resources): it grants the executor its share
  (``HAMI_SPARK_SHARE``, JSON: a request part plus ``task_type``, ``queue``,
  ``grant_timeout_s``; set with ``spark.executorEnv.HAMI_SPARK_SHARE``) through the node's
  ledger, starts the watcher that releases it when the executor exits, and reports the
  share's devices as the executor's processes see them: ordinals ``0..count-1`` under the
  visible-devices variable the share sets.
- **Run by a standalone worker** (``spark.worker.resource.gpu.discoveryScript``; a
  standalone executor gets its resources from its worker and runs no discovery): it
  reports the node's share slots, ``split-count`` per device (the most sharers a device
  admits), for the worker to hand to executors.  Each executor's share is then granted by
  its Python daemon (``spark.python.daemon.module``) before any task runs.

It prints ``{"name": "gpu", "addresses": [...]}``; a refusal exits 1 with the reason codes on
stderr, which Spark reports as the executor's failure to start.
"""

from __future__ import annotations

import json
import os
import sys

from hami_devices.errors import HamiError
from hami_devices.integrations.shares import NodeShares
from hami_devices.integrations.spark.executor import RESOURCE_VAR, Executor
from hami_devices.integrations.spark.share import ensure_share


def executor_addresses(executor: Executor, shares: NodeShares) -> list[str]:
    handle = ensure_share(executor, shares)
    return [str(i) for i in range(len(handle.grants))]


def worker_slots(shares: NodeShares) -> list[str]:
    slots = sum(d.info.split_count for d in shares.devices())
    return [str(i) for i in range(slots)]


def main() -> int:
    shares: NodeShares | None = None
    try:
        shares = NodeShares()
        executor = Executor.parent_if_executor()
        addresses = worker_slots(shares) if executor is None else executor_addresses(executor, shares)
    except HamiError as exc:
        print(f"hami-spark-discover: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if shares is not None:
            shares.close()
    print(json.dumps({"name": os.environ.get(RESOURCE_VAR, "gpu"), "addresses": addresses}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
