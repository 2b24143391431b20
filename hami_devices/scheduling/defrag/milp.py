"""Moved: ``solve`` to ``hami_devices.research.defrag.milp`` (``Solution`` and ``greedy`` to the core's
``hami_devices.scheduling.defrag.plan``); this path warns and forwards for one release."""

from hami_devices.lazy_names import forwarder

__getattr__ = forwarder(__name__, "hami_devices.research.defrag.milp")
