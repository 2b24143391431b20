"""ResourceClaims (resource.k8s.io/v1) read into what the allocator needs.

The claim is first validated by the official client's model (types, field names),
then read: each request is ``exactly`` one device request or a ``firstAvailable``
list of sub-requests (tried in order), with its class, CEL selectors, count,
allocation mode and capacity requests; constraints are ``matchAttribute`` or
``distinctAttribute`` over some or all requests.  Every problem is an
``InvalidRequest`` naming the claim and the field.  The claim's annotations may name HAMi's
scheduling policies and the compute policy of its shares (``hami_devices.kubernetes.policies``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes.dra import names
from hami_devices.kubernetes.policies import annotated_core_policy, annotated_policy
from hami_devices.models import CorePolicy, RequestPolicy

ALL = "All"
EXACT_COUNT = "ExactCount"


@dataclass(frozen=True)
class SubRequest:
    """One way to satisfy a request: ``name`` is what the allocation result names (``req`` or ``req/sub``)."""

    name: str
    request: str
    device_class: str
    selectors: tuple[str, ...]
    mode: str
    count: int
    capacity: tuple[tuple[str, str], ...]  # (capacity name, quantity), in the claim's order
    field: str


@dataclass(frozen=True)
class Request:
    name: str
    alternatives: tuple[SubRequest, ...]


@dataclass(frozen=True)
class Constraint:
    requests: tuple[str, ...]  # empty: every request
    match: str | None = None
    distinct: str | None = None

    def applies(self, request: str) -> bool:
        return not self.requests or request in self.requests


@dataclass
class Claim:
    name: str
    namespace: str
    uid: str
    requests: list[Request]
    constraints: list[Constraint]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    policy: RequestPolicy | None = None  # HAMi's policy annotations on the claim
    core_policy: CorePolicy | None = None  # hami-devices.io/core-policy: how its shares' cores are kept

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def allocation(self) -> dict[str, Any] | None:
        status = self.raw.get("status") or {}
        allocation: dict[str, Any] | None = status.get("allocation")
        return allocation


def parse_claim(data: Any, source: str = "<claim>") -> Claim:
    from kubernetes.client import ResourceV1ResourceClaim
    from pydantic import ValidationError

    if not isinstance(data, dict) or data.get("kind") != "ResourceClaim":
        raise InvalidRequest("kind", "expected a ResourceClaim object", source=source)
    if data.get("apiVersion") != "resource.k8s.io/v1":
        got = data.get("apiVersion")
        raise InvalidRequest("apiVersion", f"expected resource.k8s.io/v1, got {got!r}", source=source)
    try:
        ResourceV1ResourceClaim.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "<root>"
        raise InvalidRequest(where, str(err.get("msg")), source=source) from None
    meta = data.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "claim"
    namespace = meta.get("namespace") or "default"
    uid = meta.get("uid") or hashlib.sha1(f"{namespace}/{name}".encode()).hexdigest()
    label = f"{namespace}/{name}"
    devices = (data.get("spec") or {}).get("devices") or {}
    raw_requests = devices.get("requests") or []
    if not raw_requests:
        raise InvalidRequest("spec.devices.requests", f"claim {label} requests no devices", source=source)
    requests: list[Request] = []
    for i, raw in enumerate(raw_requests):
        where = f"spec.devices.requests[{i}]"
        rname = raw.get("name") or ""
        if names.label(rname) != rname:
            raise InvalidRequest(f"{where}.name", f"claim {label}: {rname!r} is not a DNS label", source=source)
        exactly, first = raw.get("exactly"), raw.get("firstAvailable")
        if (exactly is None) == (first is None):
            raise InvalidRequest(where, f"claim {label}: set exactly one of exactly and firstAvailable", source=source)
        if exactly is not None:
            if exactly.get("adminAccess"):
                raise InvalidRequest(f"{where}.exactly.adminAccess", "admin access is not supported", source=source)
            alternatives: tuple[SubRequest, ...] = (_sub(exactly, rname, rname, f"{where}.exactly", label, source),)
        else:
            subs = []
            for j, sub in enumerate(first):
                sname = sub.get("name") or ""
                subs.append(_sub(sub, rname, f"{rname}/{sname}", f"{where}.firstAvailable[{j}]", label, source))
            if not subs:
                raise InvalidRequest(f"{where}.firstAvailable", f"claim {label}: empty list", source=source)
            alternatives = tuple(subs)
        requests.append(Request(rname, alternatives))
    known = [r.name for r in requests]
    if len(set(known)) != len(known):
        raise InvalidRequest("spec.devices.requests", f"claim {label}: request names repeat", source=source)
    constraints = []
    for k, raw in enumerate(devices.get("constraints") or []):
        where = f"spec.devices.constraints[{k}]"
        listed = tuple(raw.get("requests") or ())
        unknown = [r for r in listed if r.split("/", 1)[0] not in known]
        if unknown:
            raise InvalidRequest(f"{where}.requests", f"claim {label}: unknown requests {unknown}", source=source)
        match, distinct = raw.get("matchAttribute"), raw.get("distinctAttribute")
        if (match is None) == (distinct is None):
            raise InvalidRequest(where, "set exactly one of matchAttribute and distinctAttribute", source=source)
        constraints.append(Constraint(tuple(r.split("/", 1)[0] for r in listed), match, distinct))
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        annotations = {}
    try:
        policy = annotated_policy(annotations, "metadata.annotations")
        core_policy = annotated_core_policy(annotations, "metadata.annotations")
    except InvalidRequest as exc:
        raise InvalidRequest(exc.field, f"claim {label}: {exc.message}", source=source) from None
    return Claim(name, namespace, uid, requests, constraints, data, policy, core_policy)


def _sub(raw: dict[str, Any], request: str, name: str, where: str, label: str, source: str) -> SubRequest:
    device_class = raw.get("deviceClassName")
    if not device_class:
        raise InvalidRequest(f"{where}.deviceClassName", f"claim {label}: a device class is required", source=source)
    mode = raw.get("allocationMode") or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        raise InvalidRequest(f"{where}.allocationMode", f"claim {label}: {mode!r} is not ExactCount or All",
                             source=source)
    count = raw.get("count")
    if mode == ALL and count is not None:
        raise InvalidRequest(f"{where}.count", f"claim {label}: count is not allowed with allocationMode All",
                             source=source)
    count = 1 if count is None else int(count)
    if count < 1:
        raise InvalidRequest(f"{where}.count", f"claim {label}: must be at least 1", source=source)
    selectors = tuple(
        s["cel"]["expression"] for s in raw.get("selectors") or [] if (s.get("cel") or {}).get("expression")
    )
    capacity = tuple(((raw.get("capacity") or {}).get("requests") or {}).items())
    return SubRequest(name, request, device_class, selectors, mode, count,
                      tuple((str(k), str(v)) for k, v in capacity), where)
