"""Kubernetes faces of the SDK: ``dra`` (Dynamic Resource Allocation driver pieces) and ``extender``.

They need the optional ``[kubernetes]`` extra.  ``quantity`` (Kubernetes' quantities and the SDK's
units on top) needs nothing beyond the standard library: the command line uses it too.
"""
