"""Filter: the devices that can take one part of a request now, by the rule table over the cluster's arrays.

Every rule comes from ``hami_devices.rules``; this module only says over which
rows they run.  ``MATCH`` rows are a mask kept per cluster layout, ``STATE``
rows the cluster's ``ready`` column, the vendor's rounding is asked (through
``ClusterState.demand``) only where a device's rule is not the plain share,
and the ``FIT`` rows run over every row at once.  ``device_codes`` runs the
same rows in their reporting order to say why each device was turned down.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hami_devices.models import Grant, RequestPart, ResourceRequest
from hami_devices.rules import (
    DEVICE_CODES,
    FIT_RULES,
    NODE_RULES,
    ROUND_RULES,
    STATE_RULES,
    HostDemand,
    first_failure,
    passing,
)
from hami_devices.rules.columns import BoolArray, IntArray
from hami_devices.scheduling.cluster import ClusterState

_CODE_INDEX = {code: i for i, code in enumerate(DEVICE_CODES)}
_AFTER_MATCH = (*ROUND_RULES, *FIT_RULES)


@dataclass
class Candidates:
    """The devices that can take one part now: rows, and what the part takes on each."""

    rows: IntArray
    memory: IntArray  # MiB on each candidate
    cores: IntArray | None  # cores on each candidate where a rule rounds them; None: the part's own everywhere
    grants: dict[int, Grant]  # row -> the grant its rule rounded to (devices that are not plain)


def host_ok(cluster: ClusterState, request: ResourceRequest) -> BoolArray:
    """Per node row: does the node pass every node rule for ``request`` now?"""
    return passing(NODE_RULES, cluster.node_view(), HostDemand.of(request))


def asked_rows(cluster: ClusterState, part: RequestPart, ok: BoolArray) -> IntArray:
    """Rows of ``ok`` whose rule must round the part (a partition part: all; else those not plain)."""
    size = cluster.size
    if part.partition is not None:
        return np.flatnonzero(ok)
    if cluster.plain[:size].all():
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(ok & ~cluster.plain[:size])


def candidates(
    cluster: ClusterState,
    part: RequestPart,
    index: int,
    *,
    host: BoolArray | None = None,
    mask: BoolArray | None = None,
) -> Candidates:
    """Every device that can take ``part`` now (``host``: per node row, the nodes allowed; ``mask``: per
    device row, the devices allowed)."""
    c = cluster
    size = c.size
    ok = c.ready[:size] & c.match_ok(part)
    if host is not None:
        ok &= host[c.node[:size]]
    if mask is not None:
        ok &= mask[:size]
    demand, grants = c.demand(part, index, asked_rows(c, part, ok))
    ok &= ~demand.refused
    passing(FIT_RULES, c.view(), demand, out=ok)
    rows = np.flatnonzero(ok)
    cores = None if isinstance(demand.cores, int) else demand.cores[rows]
    return Candidates(rows, demand.memory[rows], cores, grants)


def device_codes(cluster: ClusterState, part: RequestPart, index: int) -> tuple[IntArray, IntArray]:
    """Each live row's first failing rule (index into ``DEVICE_CODES``; -1 passes), for explaining.

    Devices on unschedulable nodes get no code: their node's code says why.
    """
    c = cluster
    rows = c.live_rows()
    at = c.live_index()  # a slice when the arrays have no holes: views, not copies
    view = c.view(at)
    codes = c.match_codes(part, _CODE_INDEX)[at].copy()
    first_failure(STATE_RULES, view, None, codes, _CODE_INDEX)
    node_ok = c.node_ok[c.node[at]]
    open_rows = np.zeros(c.size, dtype=bool)
    open_rows[rows[(codes < 0) & node_ok]] = True
    demand, _ = c.demand(part, index, asked_rows(c, part, open_rows))
    first_failure(_AFTER_MATCH, view, demand.take(at), codes, _CODE_INDEX)
    codes[~node_ok] = -1
    return rows, codes

