"""The name of the node this process runs on: the one name its devices, exporter series, events, DRA pool and the
extender's view of the cluster all carry.

In order: an explicit name (``--node-name``), the configuration's ``node-name``, ``NODE_NAME`` (what a pod
gets from the downward API: ``env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]``),
then the host's name, lower-cased as the kubelet lower-cases it when it registers the node.  The result
must be a Kubernetes node name (a DNS subdomain); ``localhost`` is refused: two nodes would share it, and the
API server has no such node.

With a ledger (``node_for_ledger``) the name is the one the ledger recorded at its first use on a node,
whatever the host's name; a source above that names another node is refused with both names and the fix.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping

from hami_devices.config import HamiConfig
from hami_devices.errors import InvalidRequest
from hami_devices.ledger.base import Ledger
from hami_devices.ledger.served_node import ledger_label, record_served, served

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
    given = given_node(explicit, config, environ=environ)
    if given is not None:
        return given[0]
    return _checked(hostname().strip().lower(), "the host's name")


def given_node(
    explicit: str | None = None, config: HamiConfig | None = None, *, environ: Mapping[str, str] = os.environ
) -> tuple[str, str] | None:
    """(name, the source that gave it) from ``--node-name``, the configuration or ``NODE_NAME``; None if none does."""
    sources: list[tuple[str, str | None]] = [
        ("--node-name", explicit),
        ("node-name (configuration)", config.node_name if config is not None else None),
        (ENVIRONMENT, environ.get(ENVIRONMENT)),
    ]
    for field, value in sources:
        if value:
            return _checked(value.strip(), field), field
    return None


def node_for_ledger(
    ledger: Ledger,
    explicit: str | None = None,
    config: HamiConfig | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    hostname: Callable[[], str] = socket.gethostname,
) -> str:
    """The node whose devices ``ledger`` holds grants on: the one it recorded, else this node's name (then
    recorded).  A source that names another node than the recorded one is an ``InvalidRequest`` naming both."""
    recorded = served(ledger).node
    given = given_node(explicit, config, environ=environ)
    if recorded is None:
        here = given[0] if given is not None else node_name(None, None, environ={}, hostname=hostname)
        recorded = record_served(ledger, here).node  # another process may have recorded its name first
        assert recorded is not None
    if given is not None and given[0] != recorded:
        name, field = given
        fix = {"--node-name": f"give --node-name {recorded}",
               ENVIRONMENT: f"set {ENVIRONMENT}={recorded} (or unset it)"}.get(field, f"set node-name: {recorded}")
        raise InvalidRequest(
            field,
            f"node {name!r}, but {ledger_label(ledger)} serves node {recorded!r} (recorded at its first use): "
            f"{fix} to use this ledger, or give node {name!r} a ledger of its own (--ledger, $HAMI_LEDGER)",
        )
    return recorded


def _checked(name: str, field: str) -> str:
    if name in _LOCAL:
        raise InvalidRequest(field, f"{name!r} names no node: give --node-name, node-name in the configuration, or "
                             f"{ENVIRONMENT} (the downward API's spec.nodeName)")
    if len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        raise InvalidRequest(field, f"{name!r} is not a Kubernetes node name (a lower-case DNS subdomain)")
    return name
