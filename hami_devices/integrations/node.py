"""One worker node's devices and ledger, named by environment variables its processes inherit.

An engine that embeds the SDK (a Ray runtime-env agent, an Airflow worker, a Spark
executor) grants shares in processes the engine starts, so the node's set-up travels
as variables in the environment of the node's engine processes:

- ``HAMI_INVENTORY``: an inventory file (the simulated back end); unset: the vendor libraries;
- ``HAMI_NODE``: which inventory node this node is (needed when the inventory has several); on hardware,
  the node's name (default: the ledger's node, ``NODE_NAME``, the host's name: ``node_identity``);
- ``HAMI_CONFIG``: the configuration YAML; ``HAMI_VENDORS``: comma-separated vendors to load;
- ``HAMI_LEDGER``: the node's durable ledger, a SQLite file or a ``postgresql://`` URL (default as for the CLI).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

from hami_devices.config import HamiConfig, load_config
from hami_devices.device import Device
from hami_devices.discovery import find_devices
from hami_devices.errors import InvalidRequest
from hami_devices.ledger import Ledger
from hami_devices.ledger.opening import LedgerTarget, ledger_target, open_ledger
from hami_devices.ledger.paths import default_ledger_path
from hami_devices.node_identity import node_for_ledger
from hami_devices.registry import load_vendors

VARIABLES = ("HAMI_INVENTORY", "HAMI_NODE", "HAMI_CONFIG", "HAMI_VENDORS", "HAMI_LEDGER")


@dataclass(frozen=True)
class NodeSetup:
    """Where one node's devices come from and where its allocations are recorded."""

    ledger: LedgerTarget
    inventory: Path | None = None
    node: str | None = None
    config: Path | None = None
    vendors: tuple[str, ...] = ()

    kind: ClassVar[str] = "node"  # how errors name the node ("Ray node", ...)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        env = os.environ if env is None else env
        ledger = env.get("HAMI_LEDGER")
        return cls(
            ledger=ledger_target(ledger, field="HAMI_LEDGER") if ledger else default_ledger_path(),
            inventory=Path(env["HAMI_INVENTORY"]) if env.get("HAMI_INVENTORY") else None,
            node=env.get("HAMI_NODE") or None,
            config=Path(env["HAMI_CONFIG"]) if env.get("HAMI_CONFIG") else None,
            vendors=tuple(v for v in env.get("HAMI_VENDORS", "").split(",") if v),
        )

    def variables(self) -> dict[str, str]:
        """The ``HAMI_*`` variables that describe this set-up to the node's processes."""
        found = {
            # the node's processes may run in another folder
            "HAMI_LEDGER": str(self.ledger.resolve()) if isinstance(self.ledger, Path) else self.ledger,
            "HAMI_INVENTORY": str(self.inventory.resolve()) if self.inventory else "",
            "HAMI_NODE": self.node or "",
            "HAMI_CONFIG": str(self.config.resolve()) if self.config else "",
            "HAMI_VENDORS": ",".join(self.vendors),
        }
        return {k: v for k, v in found.items() if v}

    def load_config(self) -> HamiConfig:
        return load_config(self.config) if self.config else HamiConfig()

    def devices(self, ledger: Ledger | None = None) -> list[Device]:
        """This node's devices, each recording its allocations in the node's ledger."""
        config = self.load_config()
        registry = load_vendors(self.vendors or None, config)
        ledger = ledger or open_ledger(self.ledger)
        found = find_devices(self.inventory, vendors=self.vendors or None, config=config, ledger=ledger,
                             registry=registry, node=self.node if self.inventory is None else None)
        found.require()  # a library that did not load is named here, not left to read as "never fits"
        if self.inventory is None:
            return found.devices
        return self._this_node(found.devices)

    def node_name(self, ledger: Ledger) -> str:
        """The node this set-up's shares are on, even when it has no device: ``HAMI_NODE`` for an
        inventory, else the name ``node_identity`` gives this node with its ledger."""
        if self.inventory is not None and self.node is not None:
            return self.node
        return node_for_ledger(ledger, self.node, self.load_config())

    def _this_node(self, devices: Sequence[Device]) -> list[Device]:
        names = list(dict.fromkeys(d.info.node for d in devices))
        node = self.node
        if node is None:
            if len(names) != 1:
                raise InvalidRequest("node (HAMI_NODE)", f"the inventory has nodes {names}: name this {self.kind}'s")
            node = names[0]
        if node not in names:
            raise InvalidRequest("node (HAMI_NODE)", f"{node!r} is not a node of {self.inventory} (nodes: {names})")
        return [d for d in devices if d.info.node == node]
