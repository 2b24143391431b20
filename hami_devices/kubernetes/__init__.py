"""Kubernetes faces of the SDK: ``dra`` (Dynamic Resource Allocation driver pieces).

Everything here needs the optional ``[kubernetes]`` extra.  Modules shared by the
Kubernetes pieces (quantities) sit at this level; each sub-package places work only
through the scheduling engine.
"""
