"""HAMi's per-workload policy annotations, read the same way for a Pod (the extender) and a ResourceClaim (DRA).

``hami.io/node-scheduler-policy`` names the policy that chooses the node and
``hami.io/gpu-scheduler-policy`` the one that chooses the devices on it (any
built-in or configured policy); either may be absent.  They become the request's
``policy``, which overrides the engine's own for that level.

The compute policy of the workload's shares (``RequestPart.core_policy``) comes from
``hami-devices.io/core-policy``, and on a Pod also from a container's
``GPU_CORE_UTILIZATION_POLICY``, the variable HAMi's webhook sets from its
``gpuCorePolicy`` (``hami_core_policy`` maps its values).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.models import CORE_POLICIES, CorePolicy, RequestPolicy

NODE_POLICY = "hami.io/node-scheduler-policy"
DEVICE_POLICY = "hami.io/gpu-scheduler-policy"
CORE_POLICY = "hami-devices.io/core-policy"
HAMI_CORE_POLICY_VARIABLE = "GPU_CORE_UTILIZATION_POLICY"

HAMI_CORE_POLICIES: dict[str, CorePolicy] = {"default": "share", "force": "cap", "disable": "unlimited"}
"""HAMi's ``gpuCorePolicy`` values and the mode each is.

- ``default`` is ``share``: the share holds while others compete, and time the device has free goes to
  whoever is busy, so the share is a guarantee with idle time on top;
- ``force`` is ``cap``: the share is a ceiling however idle the device is;
- ``disable`` is ``unlimited``: the cores are still booked, but the limiter paces no compute.
"""


def annotated_policy(annotations: Mapping[str, Any], where: str) -> RequestPolicy | None:
    """The request policy the annotations name, or None; ``where`` is the annotations' field for errors."""
    node, device = annotations.get(NODE_POLICY), annotations.get(DEVICE_POLICY)
    if not node and not device:
        return None
    for key, value in ((NODE_POLICY, node), (DEVICE_POLICY, device)):
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"{where}.{key}", "must be a policy name")
    return RequestPolicy(node=node or None, device=device or None)


def hami_core_policy(value: object, field: str) -> CorePolicy:
    """HAMi's ``gpuCorePolicy`` value (any case, as HAMi-core compares it) as a core policy."""
    policy = HAMI_CORE_POLICIES.get(value.strip().lower()) if isinstance(value, str) else None
    if policy is None:
        raise InvalidRequest(field, f"HAMi's gpuCorePolicy is default, force or disable, got {value!r}")
    return policy


def annotated_core_policy(annotations: Mapping[str, Any], where: str) -> CorePolicy | None:
    """The core policy ``hami-devices.io/core-policy`` names: ours (cap, share, unlimited) or HAMi's
    ``gpuCorePolicy`` values (default, force, disable); None where it is absent."""
    value = annotations.get(CORE_POLICY)
    if value in (None, ""):
        return None
    policy = _ANNOTATED.get(value.strip().lower()) if isinstance(value, str) else None
    if policy is None:
        raise InvalidRequest(
            f"{where}.{CORE_POLICY}",
            f"must be cap, share or unlimited (or HAMi's default, force, disable), got {value!r}",
        )
    return policy


_ANNOTATED: dict[str, CorePolicy] = {**{p: p for p in CORE_POLICIES}, **HAMI_CORE_POLICIES}
