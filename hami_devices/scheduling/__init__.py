"""The scoring engine: cluster state, filter/score/select, scorers, policies, fragmentation."""

from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine, Placement
from hami_devices.scheduling.fragmentation import fragmentation
from hami_devices.scheduling.policies import BUILTIN, Policy, load_policies
from hami_devices.scheduling.precision import recommend_precision

__all__ = [
    "BUILTIN",
    "ClusterState",
    "Engine",
    "Placement",
    "Policy",
    "fragmentation",
    "load_policies",
    "recommend_precision",
]
