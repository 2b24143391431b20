"""One Ray node's devices and ledger, named by environment variables its Ray processes inherit.

The runtime-env agent that grants shares runs in a process Ray starts, so the node's
set-up travels as variables set when the node starts (``hami-devices ray start`` or
``integrations.ray.init`` set them):

- ``HAMI_INVENTORY``: an inventory file (the simulated back end); unset: the vendor libraries;
- ``HAMI_NODE``: which inventory node this Ray node is (needed when the inventory has several);
- ``HAMI_CONFIG``: the configuration YAML; ``HAMI_VENDORS``: comma-separated vendors to load;
- ``HAMI_LEDGER``: the node's durable SQLite ledger (default as for the CLI).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_devices.config import HamiConfig, load_config
from hami_devices.device import Device
from hami_devices.discovery import discover
from hami_devices.errors import InvalidRequest
from hami_devices.ledger import Ledger, SqliteLedger
from hami_devices.ledger.paths import default_ledger_path
from hami_devices.registry import load_vendors

PLUGIN_CLASS = "hami_devices.integrations.ray.plugin.HamiPlugin"
PLUGINS_VAR = "RAY_RUNTIME_ENV_PLUGINS"
VARIABLES = ("HAMI_INVENTORY", "HAMI_NODE", "HAMI_CONFIG", "HAMI_VENDORS", "HAMI_LEDGER")


@dataclass(frozen=True)
class NodeSetup:
    """Where one Ray node's devices come from and where its allocations are recorded."""

    ledger: Path
    inventory: Path | None = None
    node: str | None = None
    config: Path | None = None
    vendors: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> NodeSetup:
        env = os.environ if env is None else env
        ledger = env.get("HAMI_LEDGER")
        return cls(
            ledger=Path(ledger) if ledger else default_ledger_path(),
            inventory=Path(env["HAMI_INVENTORY"]) if env.get("HAMI_INVENTORY") else None,
            node=env.get("HAMI_NODE") or None,
            config=Path(env["HAMI_CONFIG"]) if env.get("HAMI_CONFIG") else None,
            vendors=tuple(v for v in env.get("HAMI_VENDORS", "").split(",") if v),
        )

    def variables(self) -> dict[str, str]:
        """The ``HAMI_*`` variables that describe this set-up to the node's processes."""
        found = {
            "HAMI_LEDGER": str(self.ledger.resolve()),  # the node's processes may run in another folder
            "HAMI_INVENTORY": str(self.inventory.resolve()) if self.inventory else "",
            "HAMI_NODE": self.node or "",
            "HAMI_CONFIG": str(self.config.resolve()) if self.config else "",
            "HAMI_VENDORS": ",".join(self.vendors),
        }
        return {k: v for k, v in found.items() if v}

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Variables to start a Ray node with: the set-up, and the plugin added to any others registered."""
        base = os.environ if base is None else base
        plugins = json.loads(base.get(PLUGINS_VAR) or "[]")
        if not any(p.get("class") == PLUGIN_CLASS for p in plugins):
            plugins.append({"class": PLUGIN_CLASS})
        return {**self.variables(), PLUGINS_VAR: json.dumps(plugins)}

    def load_config(self) -> HamiConfig:
        return load_config(self.config) if self.config else HamiConfig()

    def devices(self, ledger: Ledger | None = None) -> list[Device]:
        """This node's devices, each recording its allocations in the node's ledger."""
        config = self.load_config()
        registry = load_vendors(self.vendors or None, config)
        ledger = ledger or SqliteLedger(self.ledger)
        found = discover(self.inventory, config=config, ledger=ledger, registry=registry)
        if self.inventory is None:
            return found
        return self._this_node(found)

    def _this_node(self, devices: Sequence[Device]) -> list[Device]:
        names = list(dict.fromkeys(d.info.node for d in devices))
        node = self.node
        if node is None:
            if len(names) != 1:
                raise InvalidRequest("node (HAMI_NODE)", f"the inventory has nodes {names}: name this Ray node's")
            node = names[0]
        if node not in names:
            raise InvalidRequest("node (HAMI_NODE)", f"{node!r} is not a node of {self.inventory} (nodes: {names})")
        return [d for d in devices if d.info.node == node]


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
        ledger=Path(ledger) if ledger else default_ledger_path(),
        inventory=Path(inventory) if inventory else None,
        node=node,
        config=Path(config) if config else None,
        vendors=tuple(vendors),
    )
    resources = offered_resources(setup)
    os.environ.update(setup.environment())
    extra = ray_init.pop("resources", None) or {}
    return ray.init(resources={**resources, **extra}, **ray_init)


def offered_resources(setup: NodeSetup) -> dict[str, float]:
    """The Ray resources a node with this set-up starts with (after releasing dead agents' shares)."""
    from hami_devices.integrations.ray.ownership import reap
    from hami_devices.integrations.ray.resources import node_resources

    ledger = SqliteLedger(setup.ledger)
    devices = setup.devices(ledger)
    reap(ledger, {d.info.vendor: d.adapter for d in devices}, logging.getLogger(__name__))
    return node_resources(devices)
