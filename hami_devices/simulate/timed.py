"""Moved to ``hami_devices.research.timed``; this path warns and forwards for one release."""

from hami_devices.lazy_names import forwarder

__getattr__ = forwarder(__name__, "hami_devices.research.timed")
