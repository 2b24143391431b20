"""What the hami-devices command line and ``doctor`` use of the suite, behind the
``hami_devices.conformance`` entry point (they never import the suite's modules).

Nothing here needs pytest: the checks themselves run as a pytest plugin.
"""

from __future__ import annotations

from hami_conformance.builtin import builtin_workload
from hami_conformance.catalog import catalog_path
from hami_conformance.profile import Profile, WorkloadProgram

PYTEST_PLUGIN = "hami_conformance.plugin"
"""The suite's pytest plugin (also registered as ``pytest11``)."""

__all__ = ["PYTEST_PLUGIN", "Profile", "WorkloadProgram", "builtin_workload", "catalog_path"]
