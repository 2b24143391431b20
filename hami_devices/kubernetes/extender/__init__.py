"""A kube-scheduler HTTP extender (``k8s.io/kube-scheduler/extender/v1``) over the scheduling engine.

``Extender`` holds the verbs (filter, prioritize, preempt, bind) over the engine and
the durable ledger; ``server.serve`` puts them behind HTTP; ``pods`` reads HAMi's
resource names and annotations; ``kube`` is the Kubernetes side of binding (the API
server; test doubles that record binds are in ``hami_devices.testing``); ``leases``
explains why no node lock can leak.
"""

from hami_devices.kubernetes.extender.core import Extender
from hami_devices.kubernetes.extender.deadline import Deadline
from hami_devices.kubernetes.extender.kube import ApiServerBinder, BindFailed, PodBinder
from hami_devices.kubernetes.extender.pods import PodRef, PodRequest, pod_request
from hami_devices.kubernetes.extender.preempt import LowestPriorityVictims, VictimSearch
from hami_devices.kubernetes.extender.server import ExtenderServer, ServerSettings, serve

__all__ = [
    "ApiServerBinder",
    "BindFailed",
    "Deadline",
    "Extender",
    "ExtenderServer",
    "LowestPriorityVictims",
    "PodBinder",
    "PodRef",
    "PodRequest",
    "ServerSettings",
    "VictimSearch",
    "pod_request",
    "serve",
]
