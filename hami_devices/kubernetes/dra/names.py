"""The driver's names: driver, attribute domain, device names (DNS labels), share ids (UUIDs), handle ids."""

from __future__ import annotations

import hashlib
import re
import uuid

DRIVER = "hami-devices.io"
"""The DRA driver name; also the domain of the driver's own attributes and capacities."""
DOMAIN = DRIVER
NVIDIA_DOMAIN = "gpu.nvidia.com"
"""NVIDIA's k8s-dra-driver-gpu domain: its attribute names are published there too, so selectors written for
that driver keep working."""

KIND_DEVICE = "device"
KIND_PARTITION = "partition"

_PREFIX = {"nvidia": "gpu", "ascend": "npu", "cambricon": "mlu"}
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")
MAX_LABEL = 63


def label(text: str) -> str:
    """``text`` as a DNS label (lowercase alphanumerics and '-', at most 63, alphanumeric at both ends).

    Too-long names keep a hash of the full text so that two names never collapse into one.
    """
    out = _NOT_LABEL.sub("-", text.lower()).strip("-") or "x"
    if len(out) > MAX_LABEL:
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        out = out[: MAX_LABEL - 9].rstrip("-") + "-" + digest
    return out


def device_name(vendor: str, index: int) -> str:
    """``gpu-0``, ``npu-3``, ``mlu-1``; a third-party vendor's devices are named after the vendor."""
    return label(f"{_PREFIX.get(vendor, vendor)}-{index}")


def partition_name(parent: str, profile: str, slot: int) -> str:
    """One partition device: the parent's name, the profile, and its slot (placement start or instance number)."""
    return label(f"{parent}-{profile}-{slot}")


SHARE_NAMESPACE = uuid.UUID("5f0c8a52-3e1d-4b9a-9d43-7b2f6a0c1e24")
"""The name space of the driver's share ids (RFC 4122 version 5 UUIDs)."""


def share_id(claim_uid: str, request: str, device: str) -> str:
    """The ``shareID`` of one share of a device: an RFC 4122 UUID in normalized form, as the API requires.

    A name-based (version 5) UUID of the claim, request and device, so an allocation
    retried for the same claim gets the same id, and two shares never collide.
    """
    return str(uuid.uuid5(SHARE_NAMESPACE, f"{claim_uid}/{request}/{device}"))


def handle_id(claim_uid: str) -> str:
    """The ledger id of a prepared claim: fixed per claim, so a retried prepare finds its own allocation."""
    return "dra-" + re.sub(r"[^A-Za-z0-9_.-]", "_", claim_uid)
