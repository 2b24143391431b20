"""The name of the node this process runs on: the one name its devices, exporter series, events, DRA pool and the
extender's view of the cluster all carry.

In order: an explicit name (``--node-name``), the configuration's ``node-name``, ``NODE_NAME`` (what a pod
gets from the downward API: ``env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]``),
then the host's name, lower-cased as the kubelet lower-cases it when it registers the node.  The result
must be a Kubernetes node name (a DNS subdomain); ``localhost`` is refused: two nodes would share it, and the
API server has no such node.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping

from hami_devices.config import HamiConfig
from hami_devices.errors import InvalidRequest

ENVIRONMENT = "NODE_NAME"
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LOCAL = {"localhost", "localhost.localdomain", "localhost6", "localhost6.localdomain6"}


def node_name(
    explicit: str | None = None,
    config: HamiConfig | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    hostname: Callable[[], str] = socket.gethostname,
) -> str:
    """This node's name, from the first source that gives one (see the module's docstring)."""
    sources: list[tuple[str, str | None]] = [
        ("--node-name", explicit),
        ("node-name (configuration)", config.node_name if config is not None else None),
        (ENVIRONMENT, environ.get(ENVIRONMENT)),
    ]
    for field, value in sources:
        if value:
            return _checked(value.strip(), field)
    return _checked(hostname().strip().lower(), "the host's name")


def _checked(name: str, field: str) -> str:
    if name in _LOCAL:
        raise InvalidRequest(field, f"{name!r} names no node: give --node-name, node-name in the configuration, or "
                             f"{ENVIRONMENT} (the downward API's spec.nodeName)")
    if len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        raise InvalidRequest(field, f"{name!r} is not a Kubernetes node name (a lower-case DNS subdomain)")
    return name
