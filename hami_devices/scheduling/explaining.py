"""Explain: why a request does not fit, per node and device, and whether it ever could.

The reason codes come from the rule table (the first rule each device fails,
every node rule each node fails); this adds the two judgements a scheduler
needs to decide between waiting and failing: whether the request could fit
this cluster at all once everything is released (``permanent``), and which
nodes came nearest.  The message leads with what decides: what the request
needs ("no T4 with 16 GiB free"), the reasons of the devices that are what it
asks for, and the nearest nodes with what they have free; the devices that are
not what it asks for (``MATCH`` rows: another vendor or model) come last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hami_devices.errors import InsufficientResources, ReasonCode
from hami_devices.models import RequestPart, ResourceRequest
from hami_devices.rules import (
    DEVICE_CODES,
    DEVICE_RULES,
    MATCH_RULES,
    NODE_CODES,
    NODE_RULES,
    PART_NODE_CODES,
    HostDemand,
)
from hami_devices.rules.columns import BoolArray, IntArray
from hami_devices.scheduling.choosing import Chooser
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.scoring import ScoredPart
from hami_devices.traits import catalog_model_names, did_you_mean

NEAREST = 3
UNMATCHED = frozenset(rule.code for rule in MATCH_RULES)
"""Codes that only say a device is not what a part asks for: the noise of a refusal, reported last."""
_LIMITS = {rule.code: rule.limit for rule in DEVICE_RULES if rule.limit is not None}


def unknown_names(cluster: ClusterState, request: ResourceRequest) -> dict[str, list[ReasonCode]]:
    """Parts whose vendor or model list names nothing any device of the cluster answers to."""
    out: dict[str, list[ReasonCode]] = {}
    for i, part in enumerate(request.parts):
        if part.vendors and not any(cluster.knows_vendor(v) for v in part.vendors):
            out[f"parts.{i}.vendors"] = [ReasonCode.UNKNOWN_VENDOR]
        if part.models and not any(cluster.knows_model(m) for m in part.models):
            out[f"parts.{i}.models"] = [ReasonCode.UNKNOWN_MODEL]
    return out


def unknown_hints(cluster: ClusterState, request: ResourceRequest) -> str:
    """": parts.0.models 'A100' (did you mean A100-40GB, A100-80GB?)" for each name nothing answers to."""
    known = [*cluster.models, *catalog_model_names()]
    hints = []
    for i, part in enumerate(request.parts):
        for name in part.models:
            if not cluster.knows_model(name):
                hints.append(f"parts.{i}.models {name!r}{did_you_mean(name, known)}")
        for name in part.vendors:
            if not cluster.knows_vendor(name):
                hints.append(f"parts.{i}.vendors {name!r}{did_you_mean(name, cluster.vendors)}")
    return (": " + "; ".join(hints)) if hints else ""


def node_failures(
    cluster: ClusterState, request: ResourceRequest, rows: IntArray | slice | None = None, *, as_if_empty: bool = False
) -> list[tuple[ReasonCode, BoolArray]]:
    """Each node rule with the node rows (of ``rows``) that fail it for ``request`` (``as_if_empty``: with
    nothing allocated and every node schedulable, so what fails then never fits)."""
    view = cluster.node_view(rows)
    if as_if_empty:
        view = view.as_if_empty()
    host = HostDemand.of(request)
    out = []
    for rule in NODE_RULES:
        bad = rule.fails(view, host)
        if bad is not None:
            out.append((rule.code, bad))
    return out


NODE_ORDER: tuple[ReasonCode, ...] = (
    *NODE_CODES,
    ReasonCode.NODE_INSUFFICIENT_DEVICES,
    *DEVICE_CODES,
    ReasonCode.NODE_TOPOLOGY_UNSATISFIED,
    *PART_NODE_CODES,
)
"""The codes a node's entry may carry, in the order they are reported: its own node rules, too few devices
(then the first rule each of its devices failed), required topology, and anti-affinity between the parts."""
_DEVICES_SHORT = len(NODE_CODES)
_FIRST_DEVICE = _DEVICES_SHORT + 1


@dataclass
class ArrayExplanation:
    """Why nothing fits, as flags per node and per device: counted at once, spelled out only when read."""

    cluster: ClusterState
    node_rows: IntArray  # every live node row
    node_flags: BoolArray  # node_rows x NODE_ORDER
    device_rows: IntArray  # (device row, code) pairs, sorted by row: each rejected device with each code
    device_codes: IntArray  # positions in DEVICE_CODES

    def counts(self) -> dict[ReasonCode, int]:
        out = dict.fromkeys(NODE_ORDER, 0)
        for code, n in zip(NODE_ORDER, self.node_flags.sum(axis=0).tolist(), strict=True):
            out[code] += n
        per_code = np.bincount(self.device_codes, minlength=len(DEVICE_CODES))
        for code, n in zip(DEVICE_CODES, per_code.tolist(), strict=True):
            out[code] += n
        return out

    def codes_of_node(self) -> IntArray:
        """Per node row: how many codes its entry carries."""
        per_row = np.zeros(len(self.cluster.node_names), dtype=np.int64)
        per_row[self.node_rows] = self.node_flags.sum(axis=1)
        return per_row

    def spelled_out(self) -> dict[str, list[ReasonCode]]:
        c = self.cluster
        out: dict[str, list[ReasonCode]] = {}
        for row, flags in zip(self.node_rows.tolist(), self.node_flags, strict=True):
            if flags.any():
                out[c.node_name(row)] = [NODE_ORDER[k] for k in np.flatnonzero(flags).tolist()]
        for row, code in zip(self.device_rows.tolist(), self.device_codes.tolist(), strict=True):
            out.setdefault(c.info(row).uuid, []).append(DEVICE_CODES[code])
        return out


def explain(
    chooser: Chooser, evals: list[ScoredPart], host_ok: BoolArray, request: ResourceRequest
) -> ArrayExplanation | dict[str, list[ReasonCode]]:
    """Reason codes per node, and per rejected device, for a request that does not fit (a plain mapping when a
    part names a vendor or model nothing in the cluster answers to)."""
    c = chooser.cluster
    unknown = unknown_names(c, request)
    if unknown:  # every device would just say "mismatch"
        return unknown
    n_nodes = len(c.node_names)
    live = c.live_node_rows()
    flags = np.zeros((live.size, len(NODE_ORDER)), dtype=bool)
    for code, bad in node_failures(c, request, live):
        flags[:, NODE_ORDER.index(code)] = bad
    pairs: list[IntArray] = []
    for ev in evals:
        rows, codes = ev.device_codes
        bad = codes >= 0
        pairs.append(rows[bad] * len(DEVICE_CODES) + codes[bad])
        # a node without the host resources had no candidates: its host codes say why
        have = np.bincount(ev.nodes, minlength=n_nodes)[live]
        short = (have < ev.part.count) & host_ok[live]
        seen = np.zeros((n_nodes, len(DEVICE_CODES)), dtype=bool)
        seen[c.node[rows[bad]], codes[bad]] = True
        flags[short, _DEVICES_SHORT] = True
        flags[:, _FIRST_DEVICE : _FIRST_DEVICE + len(DEVICE_CODES)] |= seen[live] & short[:, None]
        if request.topology == "required" and ev.part.count > 1:
            for k in np.flatnonzero(~short & host_ok[live]).tolist():
                if chooser.node_choice(ev, int(live[k]), set()) is None:
                    flags[k, NODE_ORDER.index(ReasonCode.NODE_TOPOLOGY_UNSATISFIED)] = True
    if chooser.apart:  # every part could use these nodes alone: keeping the parts apart is what failed
        flags[~flags.any(axis=1), NODE_ORDER.index(ReasonCode.NODE_ANTI_AFFINITY)] = True
    elif len(evals) > 1:
        # every part alone finds devices on these nodes: the parts together need more devices than are free
        # (two parts that may use only the same card, say)
        together = ~flags.any(axis=1) & host_ok[live]
        flags[together, _DEVICES_SHORT] = True
    # each (device, code) once, in row then table order, however many parts rejected it for that code
    packed = np.unique(np.concatenate(pairs)) if len(pairs) > 1 else (pairs[0] if pairs else np.zeros(0, np.int64))
    return ArrayExplanation(c, live, flags, packed // len(DEVICE_CODES), packed % len(DEVICE_CODES))


def refusal(
    cluster: ClusterState,
    request: ResourceRequest,
    found: ArrayExplanation | dict[str, list[ReasonCode]],
    have: list[IntArray],
) -> InsufficientResources:
    """The error for a request that does not fit now: ``found`` reasons, nearest misses, permanence.

    ``have``: per part, the candidate rows it has now (nearest misses are the nodes with most of them).
    """
    label = request.name or "request"
    if isinstance(found, dict):
        return InsufficientResources(f"no placement for {label}{unknown_hints(cluster, request)}", found,
                                     permanent=True)
    fits = [cluster.fits_empty(part, i) for i, part in enumerate(request.parts)]
    permanent = not could_fit(cluster, request, fits)
    counts = found.counts()
    unmatched_only = all(n == 0 or code in UNMATCHED for code, n in counts.items() if code in DEVICE_CODES)
    no_node = _no_node(found, request)
    if no_node:
        return InsufficientResources(f"no placement for {label}: {no_node}", found, permanent=permanent,
                                     unmatched=UNMATCHED)
    if request.parts and unmatched_only and not any(rows.size for rows in have):
        headline = f"no device is {' + '.join(_asked(p) for p in request.parts)}"
    elif request.parts:
        headline = "no " + " + ".join(_wanted(p) for p in request.parts) + _context_note(cluster, found)
    else:
        headline = f"no node with {request.host_cpu_milli}m CPU and {_amount(request.host_memory_mib)} free"
    near = nearest(cluster, request, found, have) or closest(cluster, found, request)
    return InsufficientResources(
        f"no placement for {label}: {headline}", found, permanent=permanent, nearest=near, unmatched=UNMATCHED
    )


def _context_note(cluster: ClusterState, found: ArrayExplanation) -> str:
    """Where devices were short of memory with a context to book: say the context counts, and how much."""
    short = found.device_rows[found.device_codes == DEVICE_CODES.index(ReasonCode.CARD_INSUFFICIENT_MEMORY)]
    contexts = cluster.context_mib[short]
    if not contexts.any():
        return ""
    return f" (with {_amount(int(contexts.max()))} of context, booked on top of a shared grant's memory)"


def _amount(mib: int) -> str:
    if mib < 1024:
        return f"{mib} MiB"
    return f"{mib // 1024} GiB" if mib % 1024 == 0 else f"{mib / 1024:.1f} GiB"


def _asked(part: RequestPart) -> str:
    """What a part asks a device to be: "2 x T4/L4", "nvidia", "selected device (of 36)", "a device"."""
    if len(part.uuids) > 2 and not (part.models or part.vendors):  # a selection (DRA's CEL selectors)
        many = f"{part.count} selected devices" if part.count > 1 else "selected device"
        return f"{many} (of {len(part.uuids)})"
    names = part.models or part.vendors or part.uuids
    what = "/".join(names) if names else "device"
    return f"{part.count} x {what}" if part.count > 1 else (what if names else "a device")


def _wanted(part: RequestPart) -> str:
    """What a part needs free: "T4 with 16 GiB and 30% compute free", "whole H100 free"."""
    what = _asked(part).removeprefix("a ")  # follows "no" (or "whole"): "no device free", not "no a device free"
    needs = [] if part.memory_mib is None else [_amount(part.memory_mib)]
    if part.memory_percent is not None:
        needs.append(f"{part.memory_percent:g}% of its memory")
    if part.cores >= 100:
        what = f"whole {what}"
    elif part.cores:
        needs.append(f"{part.cores}% compute")
    return f"{what} with {' and '.join(needs)} free" if needs else f"{what} free"


def closest(cluster: ClusterState, found: ArrayExplanation, request: ResourceRequest) -> list[str]:
    """Where no node has a device to offer now: the nodes whose best device short of memory or compute has the
    most of it free, with what it has ("t4-1 (12 GiB free)"; compute too where the request asks for some)."""
    short = [DEVICE_CODES.index(c) for c in (ReasonCode.CARD_INSUFFICIENT_MEMORY, ReasonCode.CARD_INSUFFICIENT_CORE)]
    rows = found.device_rows[np.isin(found.device_codes, short)]
    if rows.size == 0:
        return []
    view = cluster.view(rows)
    memory, cores = _LIMITS[ReasonCode.CARD_INSUFFICIENT_MEMORY], _LIMITS[ReasonCode.CARD_INSUFFICIENT_CORE]
    free_mem = memory.cap(view) - memory.used(view)
    free_cores = cores.cap(view) - cores.used(view)
    order = np.lexsort((-free_cores, -free_mem))  # most memory free first, then most compute
    nodes = cluster.node[rows[order]]
    _, first = np.unique(nodes, return_index=True)  # each node's best device
    best = order[np.sort(first)][:NEAREST]
    compute = any(p.cores for p in request.parts)
    return [
        f"{cluster.node_name(int(cluster.node[rows[k]]))} ({_amount(int(free_mem[k]))}"
        + (f" and {int(free_cores[k])}% compute" if compute else "")
        + " free)"
        for k in best.tolist()
    ]


def could_fit(cluster: ClusterState, request: ResourceRequest, fits: list[BoolArray]) -> bool:
    """Whether some node (or, for a split request, some node per part) could hold the request when empty.

    Topology is not judged, so ``False`` from here is certain and ``True`` is a
    necessary condition only.
    """
    size = cluster.size
    n = len(cluster.node_names)
    host = np.zeros(n, dtype=bool)
    host[cluster.live_node_rows()] = True
    for _, bad in node_failures(cluster, request, as_if_empty=True):
        host &= ~bad
    if not request.parts:
        return bool(host.any())
    counts = [np.bincount(cluster.node[:size][f], minlength=n) for f in fits]
    if request.same_node:
        union = np.bincount(cluster.node[:size][np.logical_or.reduce(fits)], minlength=n)
        ok = host.copy()
        for part, count in zip(request.parts, counts, strict=True):
            ok &= count >= part.count
        ok &= union >= request.device_count
        return bool(ok.any())
    each = all(bool((host & (count >= part.count)).any()) for part, count in zip(request.parts, counts, strict=True))
    if any(p.anti_affinity for p in request.parts):  # parts kept apart need two nodes at least
        return each and int((host & np.logical_or.reduce([c > 0 for c in counts])).sum()) >= 2
    return each


def nearest(
    cluster: ClusterState, request: ResourceRequest, found: ArrayExplanation, have: list[IntArray]
) -> list[str]:
    """Nodes that came closest: the largest share of the request's devices free there now, then fewest reasons."""
    c = cluster
    n = len(c.node_names)
    if not request.parts:
        rows: IntArray = np.flatnonzero(c.node_ok)
        slack = np.minimum(
            c.node_cpu_free[rows] - request.host_cpu_milli, c.node_mem_free[rows] - request.host_memory_mib
        )
        order = rows[np.argsort(-slack, kind="stable")]
        return [c.node_name(int(r)) for r in order[:NEAREST]]
    counts = np.zeros(n)
    for part, rows_now in zip(request.parts, have, strict=True):
        counts += np.minimum(np.bincount(c.node[rows_now], minlength=n), part.count)
    share = counts / max(request.device_count, 1)
    codes = found.codes_of_node()
    rows = np.flatnonzero((share > 0) & (c.name_rank() < len(c.nodes)))  # named nodes rank first
    order = rows[np.lexsort((c.name_rank()[rows], codes[rows], -share[rows]))]
    candidates = order[:NEAREST].tolist()
    return [f"{c.node_names[r]} ({int(counts[r])}/{request.device_count} devices{_node_note(found, r)})"
            for r in candidates]


def _node_note(found: ArrayExplanation, row: int) -> str:
    """What a nearest node fails of its own rules (selector, taints, schedulable, host CPU and memory), said
    beside its device count: the count alone would hide it."""
    at = np.flatnonzero(found.node_rows == row)
    if at.size == 0:
        return ""
    own = [str(NODE_ORDER[k]) for k in np.flatnonzero(found.node_flags[at[0], :_DEVICES_SHORT]).tolist()]
    return f", but the node fails {', '.join(own)}" if own else ""


def _no_node(found: ArrayExplanation, request: ResourceRequest) -> str:
    """What every node fails of its own rules, said as what no node has ("" when some node passes them all):
    then no node's devices matter, and listing the nodes nearest by devices would only mislead."""
    if found.node_rows.size == 0:
        return ""
    every = [NODE_ORDER[k] for k in np.flatnonzero(found.node_flags[:, :_DEVICES_SHORT].all(axis=0)).tolist()]
    said = {
        ReasonCode.NODE_SELECTOR_MISMATCH: "no node matches the node selector "
        + ", ".join(f"{k}={v}" for k, v in sorted(request.node_selector.items())),
        ReasonCode.NODE_TAINT_NOT_TOLERATED: "no node without a taint it does not tolerate",
        ReasonCode.NODE_UNSCHEDULABLE: "no schedulable node",
        ReasonCode.NODE_INSUFFICIENT_CPU: f"no node with {request.host_cpu_milli}m CPU free",
        ReasonCode.NODE_INSUFFICIENT_MEMORY: f"no node with {_amount(request.host_memory_mib)} of host memory free",
    }
    return "; ".join(said[code] for code in every if code in said)
