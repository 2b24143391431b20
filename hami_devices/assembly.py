"""Building an engine from configuration: the layer above scheduling that knows files and plugins.

The scheduling package takes a cluster state and a policy; it never reads a
configuration file, loads a vendor plugin or discovers a device.  This module
does, in the order ``hami-devices schedule`` needs it: load the configuration
and the vendor adapters, complete the inventory with the adapters' facts, build
the cluster state with each adapter as its vendor's rule, and configure the
policy and the workload mix.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hami_devices.committing import LedgerCommitter
from hami_devices.config import HamiConfig
from hami_devices.device import Device
from hami_devices.discovery import complete_inventory, discover, load_inventory_for
from hami_devices.engine_config import configure_engine as configure_engine
from hami_devices.inputs import as_config, check_inventory
from hami_devices.inventory import Inventory
from hami_devices.ledger import Ledger
from hami_devices.ledger.conflicts import note_conflicts
from hami_devices.nodeconfig import configure_inventory
from hami_devices.registry import VendorRegistry, load_vendors
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.mix import load_from
from hami_devices.scheduling.policies import Policy


def build_engine(
    inventory: str | Path | Inventory,
    config: HamiConfig | Mapping[str, Any] | str | Path | None = None,
    *,
    policy: Policy | str | None = None,
    policies: str | Path | None = None,
    registry: VendorRegistry | None = None,
    ledger: Ledger | None = None,
    mix: WorkloadMix | None = None,
    prepare_on_node: bool = True,
) -> Engine:
    """The engine exactly as ``hami-devices schedule`` builds it.

    The inventory is completed by the vendor adapters (partition catalogs, split
    counts) loaded with ``config``; each adapter is its vendor's rule (rounding,
    memory factor, core capacity); the policy is ``policy``, else the configured
    one, with the user policies of ``policy-files`` and ``policies``.  With
    ``ledger`` its live allocations are booked (confirmed), as after a restart, the
    workload mix it keeps is continued, and the engine commits to it: ``engine.allocate``,
    ``commit``, ``release`` and ``refresh`` (``hami_devices.committing``).  ``config``: a
    ``HamiConfig``, a mapping of its keys or a YAML path.  ``prepare_on_node`` (with ``ledger``): the
    allocations carry no path of this host and their limiter regions are made by ``hami-devices prepare``
    on the node that runs the workload (``hami_devices.handoff``); False: made here at commit, as
    ``hd.allocate`` does for the devices of this host.
    """
    config = as_config(config)
    registry = registry or load_vendors(config=config)
    inventory = check_inventory(inventory)
    if not isinstance(inventory, Inventory):
        inventory = load_inventory_for(inventory, registry, config)
    given = inventory
    inventory = complete_inventory(configure_inventory(inventory, config), registry)
    cluster = ClusterState.from_inventory(inventory, rules=registry.adapters)
    engine = configure_engine(cluster, config, policy=policy, policies=policies, mix=mix)
    if ledger is not None:
        loaded, settings = registry, config

        def devices_on(ledger: Ledger) -> list[Device]:
            return discover(given, config=settings, ledger=ledger, registry=loaded)

        engine.committer = LedgerCommitter(ledger, cluster, devices_on, prepare_on_node=prepare_on_node)
        with ledger.reading() as view:
            cluster.sync(view.handles())
            kept = load_from(view)
        if cluster.conflicts:  # rows past a limit load all the same; each is recorded once for doctor
            with ledger.transaction() as view:
                note_conflicts(view, cluster.conflicts)
        if kept is not None:
            engine.use_learned_mix(kept)
    return engine
