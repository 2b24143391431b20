"""The driver's names: driver, attribute domain, device names (DNS labels), share ids, handle ids."""

from __future__ import annotations

import hashlib
import re

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


def share_id(claim_uid: str, request: str, device: str) -> str:
    """A DNS label unique among the live shares of a device: a digest of the claim, request and device."""
    return hashlib.sha1(f"{claim_uid}/{request}/{device}".encode()).hexdigest()[:16]


def handle_id(claim_uid: str) -> str:
    """The ledger id of a prepared claim: fixed per claim, so a retried prepare finds its own allocation."""
    return "dra-" + re.sub(r"[^A-Za-z0-9_.-]", "_", claim_uid)
