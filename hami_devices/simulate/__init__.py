"""Trace-driven placement simulator for the Alibaba openb trace (a sample ships in ``openb-sample/``)."""

from hami_devices.simulate.replay import ReplayResult, replay
from hami_devices.simulate.trace import TraceNodes, TracePods, load_nodes, load_pods

__all__ = ["ReplayResult", "TraceNodes", "TracePods", "load_nodes", "load_pods", "replay"]
