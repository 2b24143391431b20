"""One Ray node's devices and ledger, named by environment variables its Ray processes inherit.

The runtime-env agent that grants shares runs in a process Ray starts, so the node's
set-up (``integrations.node``: ``HAMI_INVENTORY``, ``HAMI_NODE``, ``HAMI_CONFIG``,
``HAMI_VENDORS``, ``HAMI_LEDGER``) travels as variables set when the node starts
(``hami-devices ray start`` or ``integrations.ray.init`` set them), with the plugin's
registration.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hami_devices.device import Device
from hami_devices.integrations.node import NodeSetup as BaseNodeSetup
from hami_devices.ledger import Ledger
from hami_devices.ledger.opening import ledger_target, open_ledger
from hami_devices.ledger.paths import default_ledger_target

PLUGIN_CLASS = "hami_devices.integrations.ray.plugin.HamiPlugin"
PLUGINS_VAR = "RAY_RUNTIME_ENV_PLUGINS"
# Raylets start workers for a share's runtime env that never run its task: prestarted ones, and on a cluster a
# second one on the node a task spills back to.  Each holds the share (granted, never used) for as long as it
# idles, and Ray keeps idle workers up to one per CPU.  So no prestart, and idle workers are ended after Ray's
# idle threshold (1 s): a share's env is used by one task only, so its idle worker has nothing left to run.
IDLE_WORKERS = {"RAY_enable_worker_prestart": "0", "RAY_num_workers_soft_limit": "0"}
NODE_LABEL = "hami.io/node"  # the Ray node label naming the node's devices, so a retry can leave a refusing node out


class NodeSetup(BaseNodeSetup):
    """A Ray node's set-up: the node's, plus the plugin registration its Ray processes need."""

    kind = "Ray node"

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Variables to start a Ray node with: the set-up, and the plugin added to any others registered."""
        base = os.environ if base is None else base
        plugins = json.loads(base.get(PLUGINS_VAR) or "[]")
        if not any(p.get("class") == PLUGIN_CLASS for p in plugins):
            plugins.append({"class": PLUGIN_CLASS})
        return {**self.variables(), PLUGINS_VAR: json.dumps(plugins), **IDLE_WORKERS}


def init(
    *,
    inventory: str | Path | None = None,
    node: str | None = None,
    config: str | Path | None = None,
    ledger: str | Path | None = None,
    vendors: Sequence[str] = (),
    **ray_init: Any,
) -> Any:
    """Start a local Ray node whose resources are this node's devices, with the plugin that grants them.

    The node's Ray processes inherit this process's environment, so the set-up and the
    plugin registration are written into ``os.environ`` first.  Shares of a runtime-env
    agent that is gone are released before the resources are counted.  Other keyword
    arguments go to ``ray.init``; its ``resources`` are merged with the devices'.
    """
    import ray

    setup = NodeSetup(
        ledger=ledger_target(ledger) if ledger else default_ledger_target(),
        inventory=Path(inventory) if inventory else None,
        node=node,
        config=Path(config) if config else None,
        vendors=tuple(vendors),
    )
    resources = offered_resources(setup)
    labels = {**node_labels(setup), **(ray_init.pop("labels", None) or {})}
    os.environ.update(setup.environment())
    extra = ray_init.pop("resources", None) or {}
    return ray.init(resources={**resources, **extra}, labels=labels, **ray_init)


def offered_resources(setup: NodeSetup) -> dict[str, float]:
    """The Ray resources a node with this set-up starts with (after releasing dead agents' shares)."""
    from hami_devices.integrations.ray.ownership import reap
    from hami_devices.integrations.ray.resources import node_resources

    ledger = open_ledger(setup.ledger)
    devices = setup.devices(ledger)
    reap(ledger, {d.info.vendor: d.adapter for d in devices}, logging.getLogger(__name__))
    return node_resources(devices)


def node_labels(setup: NodeSetup) -> dict[str, str]:
    """The Ray labels a node with this set-up starts with: its node name, as its refusals name it."""
    ledger = open_ledger(setup.ledger)
    return {NODE_LABEL: node_name(setup, setup.devices(ledger), ledger)}


def node_name(setup: NodeSetup, devices: Sequence[Device], ledger: Ledger) -> str:
    """The name a node's refusals and its label give it: its devices' node, else the set-up's name."""
    return devices[0].info.node if devices else setup.node_name(ledger)
