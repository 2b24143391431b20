"""The hami-devices conformance suite: certifies that a vendor adapter keeps the SDK's contract.

Run it with ``pytest --hami-adapter=NAME`` (the plugin is registered through
``pytest11`` and stays inert without that option) or ``hami-devices conformance NAME``.
An adapter can tell the suite more than the VendorAdapter interface says by
defining ``conformance_profile()`` returning a :class:`Profile`.
"""

from hami_conformance.profile import FaultInjector, Profile, WorkloadProgram

__version__ = "1.1.0"
SUITE_VERSION = __version__

__all__ = ["SUITE_VERSION", "FaultInjector", "Profile", "WorkloadProgram", "__version__"]
