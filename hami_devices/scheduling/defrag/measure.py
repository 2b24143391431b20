"""Fragmentation measured the two ways the field does, over a ``ClusterState``.

* **FGD's** (Weng et al., ATC'23): the share of the unallocated device capacity
  that the workload mix cannot use, ``sum_n F_n / sum_n idle_n``, where ``F_n``
  is the idle share of node n that each typical task shape m could not use
  there (all of it if m does not fit on n at all, else the idle share of the
  devices with less free than m needs), weighted by m's frequency.
* **The operators'**: idle capacity on partly used devices over all idle
  capacity, ``sum_{d partly used} free_d / sum_d free_d``, where a device is
  partly used when something holds it and some of it is still free.  It knows
  no workload: a free half of a device counts as fragmented whatever would fit.

Both count a device's free share as the scarcer of its free memory and free
cores (thousandths), on healthy devices; both are 0 when nothing is idle.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.fragmentation import fragmentation


def operator_rate(cluster: ClusterState) -> float:
    """Idle share on partly used devices over all idle share (0..1)."""
    rows = cluster.live_rows()
    if rows.size == 0:
        return 0.0
    free = cluster.free_share_milli(rows)
    partly = (cluster.sharers[rows] > 0) & (free > 0)
    idle = float(free.sum())
    return float(free[partly].sum()) / idle if idle > 0 else 0.0


def fgd_rate(cluster: ClusterState, mix: WorkloadMix) -> float:
    """FGD's fragmentation rate for ``mix`` (0..1)."""
    return fragmentation(cluster, mix)


@dataclass(frozen=True)
class Fragmentation:
    fgd: float
    operator: float

    def to_dict(self) -> dict[str, float]:
        return {"fgd_pct": round(100 * self.fgd, 2), "operator_pct": round(100 * self.operator, 2)}


def measure(cluster: ClusterState, mix: WorkloadMix) -> Fragmentation:
    return Fragmentation(fgd_rate(cluster, mix), operator_rate(cluster))

