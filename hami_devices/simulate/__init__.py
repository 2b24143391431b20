"""The openb trace as data: its nodes and tasks (``trace``), the protocol's arrival order, the shipped sample
(``openb-sample/``), the trace's tasks as requests and timelines.  The replays through the engine are research
(``hami_devices.research.replay``, ``.timed``); ``replay`` and ``ReplayResult`` still resolve here, with a
``DeprecationWarning``, for one release."""

from hami_devices.lazy_names import resolver
from hami_devices.simulate.trace import TraceNodes, TracePods, load_nodes, load_pods

__all__ = ["TraceNodes", "TracePods", "load_nodes", "load_pods"]

_REPLAY = "hami_devices.research.replay"
__getattr__ = resolver(__name__, globals(), {}, moved={"replay": _REPLAY, "ReplayResult": _REPLAY})
