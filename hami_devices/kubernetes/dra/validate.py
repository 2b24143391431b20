"""Holding generated objects to the Kubernetes OpenAPI schema (``kubernetes-validate``).

``SCHEMA_VERSION`` is the release our objects must pass: 1.34, where resource.k8s.io/v1
(with consumable capacity and partitionable devices) is served.  Strict mode rejects
fields 1.34 does not know, so nothing newer slips in from the client's models.  An
allocation result is validated as what it is on the wire: the ``status.allocation`` of
its ResourceClaim.
"""

from __future__ import annotations

from typing import Any

from hami_devices.errors import InvalidRequest

SCHEMA_VERSION = "1.34.0"


def validate(obj: dict[str, Any], *, version: str = SCHEMA_VERSION) -> str:
    """The schema version used; ``InvalidRequest`` naming the object and the failing path otherwise."""
    import kubernetes_validate

    try:
        used: str = kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.path) or "<root>"
        name = (obj.get("metadata") or {}).get("name", "?")
        raise InvalidRequest(f"{obj.get('kind', '?')}/{name}: {where}", exc.message) from None
    return used
