"""The compute-share check of issue 36: a kernel-size sweep, a decode-like case, two tenants at once and a
tenant arriving on a shared card, each run in its own process with the limiter's environment.

``scripts/compute_share_check.py`` is the entry point; ``--selftest`` runs the same plan on CPU stand-ins.
"""
