"""Workload programs the suite ships for the built-in vendors' runtimes (see ``Profile.workload``)."""
