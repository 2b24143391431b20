"""HAMi's per-workload policy annotations, read the same way for a Pod (the extender) and a ResourceClaim (DRA).

``hami.io/node-scheduler-policy`` names the policy that chooses the node and
``hami.io/gpu-scheduler-policy`` the one that chooses the devices on it (any
built-in or configured policy); either may be absent.  They become the request's
``policy``, which overrides the engine's own for that level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.models import RequestPolicy

NODE_POLICY = "hami.io/node-scheduler-policy"
DEVICE_POLICY = "hami.io/gpu-scheduler-policy"


def annotated_policy(annotations: Mapping[str, Any], where: str) -> RequestPolicy | None:
    """The request policy the annotations name, or None; ``where`` is the annotations' field for errors."""
    node, device = annotations.get(NODE_POLICY), annotations.get(DEVICE_POLICY)
    if not node and not device:
        return None
    for key, value in ((NODE_POLICY, node), (DEVICE_POLICY, device)):
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"{where}.{key}", "must be a policy name")
    return RequestPolicy(node=node or None, device=device or None)
