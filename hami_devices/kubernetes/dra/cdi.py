"""CDI specs for prepared claims (Container Device Interface, JSON).

One spec file per claim, kind ``hami-devices.io/claim``, with one CDI device per
(node, vendor) process group of the allocation (each group has its own limiter region
and visible-devices numbering).  A device's container edits carry that group's
environment (visible devices, HAMI_* and vendor limiter limits, ``HAMI_REGION_PATH``,
``LD_PRELOAD``) plus what the vendor's container toolkit would add (``NVIDIA_VISIBLE_DEVICES``),
the vendor's device files (``/dev/nvidia<N>`` and ``/dev/nvidiactl``, ``/dev/davinci<N>`` and
``/dev/davinci_manager``, ``/dev/cambricon_dev<N>`` and ``/dev/cambricon_ctl`` ...: each adapter's
``container_device_nodes``), and bind mounts of the limiter region and the preload library at the
same paths inside the container, so the variables mean the same thing there.
cdiVersion 0.6.0 is the first to allow annotations, which name the claim and handle.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hami_devices.adapter import VendorAdapter
from hami_devices.kubernetes.dra import names
from hami_devices.models import DeviceHandle

CDI_VERSION = "0.6.0"
CDI_CLASS = "claim"
KIND = f"{names.DRIVER}/{CDI_CLASS}"


def device_name(claim_uid: str, vendor: str) -> str:
    return f"{claim_uid}-{vendor}"


def qualified(claim_uid: str, vendor: str) -> str:
    """The fully qualified CDI device name a kubelet plugin returns for a group."""
    return f"{KIND}={device_name(claim_uid, vendor)}"


def spec_for(claim_uid: str, handle: DeviceHandle, adapters: Mapping[str, VendorAdapter]) -> dict[str, Any]:
    """The claim's spec; ``adapters`` by vendor name give each group's container environment and device files."""
    devices = []
    for node, vendor in handle.groups:
        grants = [g for g in handle.grants if g.node == node and g.vendor == vendor]
        adapter = adapters.get(vendor)
        env = dict(handle.env_for(node, vendor))
        device_nodes = []
        if adapter is not None:
            env.update(adapter.container_environment(grants))
            for container_path, host_path in adapter.container_device_nodes(grants):
                node_edit = {"path": container_path}
                if host_path != container_path:
                    node_edit["hostPath"] = host_path
                device_nodes.append(node_edit)
        mounts = []
        for key in ("HAMI_REGION_PATH", "LD_PRELOAD"):
            path = env.get(key)
            if path:
                access = "rw" if key == "HAMI_REGION_PATH" else "ro"  # the region is written by the shim
                options = [access, "nosuid", "nodev", "bind"]
                mounts.append({"hostPath": path, "containerPath": path, "options": options})
        edits: dict[str, Any] = {"env": [f"{k}={v}" for k, v in sorted(env.items())]}
        if device_nodes:
            edits["deviceNodes"] = device_nodes
        if mounts:
            edits["mounts"] = mounts
        devices.append(
            {
                "name": device_name(claim_uid, vendor),
                "annotations": {f"{names.DRIVER}/vendor": vendor, f"{names.DRIVER}/node": node},
                "containerEdits": edits,
            }
        )
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "annotations": {f"{names.DRIVER}/claim-uid": claim_uid, f"{names.DRIVER}/handle": handle.id},
        "devices": devices,
    }


def spec_path(directory: Path, claim_uid: str) -> Path:
    return directory / f"{names.DRIVER}-{CDI_CLASS}_{claim_uid}.json"


def write_spec(directory: Path, claim_uid: str, spec: dict[str, Any]) -> Path:
    """Write atomically (temp file + rename): a runtime never reads half a spec."""
    directory.mkdir(parents=True, exist_ok=True)
    target = spec_path(directory, claim_uid)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f, indent=2, sort_keys=True)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def remove_spec(directory: Path, claim_uid: str) -> None:
    spec_path(directory, claim_uid).unlink(missing_ok=True)
