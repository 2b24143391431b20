"""Cluster fragmentation (FGD) over a ``ClusterState`` (the planned defragmentation is ``scheduling.defrag``).

A device's free share is the scarcer of its free memory and free cores, in
thousandths, so FGD applies to any vendor.  ``fragmentation`` is the share of
the cluster's idle device capacity that the workload mix cannot use:
``sum_n F_n / sum_n idle_n`` (0..1), computed by the same index the
fragmentation-aware policy scores with.  Without a mix given, the mix is
learned from the requests of what the cluster holds (the neutral prior when
it holds nothing).
"""

from __future__ import annotations

from hami_devices.scheduling import fgd
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.fragindex import FragmentationIndex
from hami_devices.scheduling.mix import OnlineMix


def held_mix(cluster: ClusterState) -> fgd.WorkloadMix:
    """The mix of the requests the cluster's bookings hold (the neutral prior where there are none)."""
    learner = OnlineMix(refresh=2**62)
    for booking in cluster.bookings.values():
        if booking.request is not None:
            learner.observe(booking.request)
    return learner.derive()


def index_for(cluster: ClusterState, mix: fgd.WorkloadMix | None = None) -> FragmentationIndex:
    index = FragmentationIndex(cluster, mix or held_mix(cluster))
    index.sync()
    return index


def node_fragmentation(cluster: ClusterState, mix: fgd.WorkloadMix | None = None) -> dict[str, float]:
    """``F_n`` (thousandths of a device) per node."""
    base = index_for(cluster, mix).node_fragmentation()
    return {name: float(base[cluster.node_row(name)]) for name in cluster.nodes}


def fragmentation(cluster: ClusterState, workload_mix: fgd.WorkloadMix | None = None) -> float:
    """The cluster fragmentation rate: fragmented idle share / idle share (0 when nothing is idle)."""
    return index_for(cluster, workload_mix).fragmentation_rate()

