"""The arrival order of the published openb results (see the trace README).

1. sort the tasks by name, then shuffle them with the seeded generator;
2. append copies drawn uniformly with replacement from the original file,
   with the same generator, until the next copy would push the summed GPU
   request past ``inflation`` x the cluster's GPU capacity.

The generator is numpy's PCG64 (``default_rng(seed)``), not Go's, so single
runs differ from the published ones; means over seeds 42..51 are comparable.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hami_devices.simulate.trace import TracePods

DEFAULT_INFLATION = 1.3


def arrival_order(
    pods: TracePods, capacity_milli: int, seed: int, inflation: float = DEFAULT_INFLATION
) -> npt.NDArray[np.int64]:
    """Indices into ``pods`` in arrival order (copies repeat an index)."""
    by_name = np.array(sorted(range(len(pods)), key=lambda i: pods.names[i]), dtype=np.int64)
    rng = np.random.default_rng(seed)
    order = [int(i) for i in by_name[rng.permutation(len(by_name))]]
    request = pods.gpu_request_milli
    total = int(request.sum())
    limit = inflation * capacity_milli
    if len(by_name) == 0 or not (request > 0).any():
        return np.array(order, dtype=np.int64)
    while True:
        pick = int(by_name[int(rng.integers(len(by_name)))])
        if total + int(request[pick]) > limit:
            break
        total += int(request[pick])
        order.append(pick)
    return np.array(order, dtype=np.int64)
