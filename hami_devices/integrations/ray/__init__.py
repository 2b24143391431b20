"""Ray integration: fractional accelerators with hard memory and compute limits for Ray tasks and actors.

- ``node_resources(devices)``: a node's devices as Ray custom resources in the SDK's units;
  ``init(...)`` starts a local Ray node with them and the plugin (``hami-devices ray start`` for ``ray start``);
- ``HamiPlugin`` (``plugin.py``): the runtime-env plugin that grants, preloads and releases each share;
- ``share(...)`` / ``options(...)``: a task or actor with its own share, reserved in Ray and granted on its node;
- ``refusal(exc)``: the SDK's reason codes of a share the chosen node could not grant.
"""

from __future__ import annotations

from hami_devices.integrations.ray.errors import ShareMissing, ShareRefused, ShareRefusedEverywhere, refusal
from hami_devices.integrations.ray.node import NodeSetup, init
from hami_devices.integrations.ray.remote import SharedRemote, options, require_share, share
from hami_devices.integrations.ray.resources import node_resources, resource_name, share_resources
from hami_devices.integrations.ray.spec import ShareSpec

__all__ = [
    "NodeSetup",
    "ShareMissing",
    "ShareRefused",
    "ShareRefusedEverywhere",
    "ShareSpec",
    "SharedRemote",
    "init",
    "node_resources",
    "options",
    "refusal",
    "require_share",
    "resource_name",
    "share",
    "share_resources",
]
