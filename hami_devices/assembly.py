"""Building an engine from configuration: the layer above scheduling that knows files and plugins.

The scheduling package takes a cluster state and a policy; it never reads a
configuration file, loads a vendor plugin or discovers a device.  This module
does, in the order ``hami-devices schedule`` needs it: load the configuration
and the vendor adapters, complete the inventory with the adapters' facts, build
the cluster state with each adapter as its vendor's rule, and configure the
policy and the workload mix.
"""

from __future__ import annotations

from pathlib import Path

from hami_devices.config import HamiConfig, load_config
from hami_devices.discovery import complete_inventory, load_inventory_for
from hami_devices.inventory import Inventory
from hami_devices.ledger import Ledger
from hami_devices.ledger.conflicts import note_conflicts
from hami_devices.models import RequestDefaults
from hami_devices.nodeconfig import configure_inventory
from hami_devices.registry import VendorRegistry, load_vendors
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.mix import OnlineMix, declared_mix, load_from
from hami_devices.scheduling.policies import Policy, configured_policies


def build_engine(
    inventory: str | Path | Inventory,
    config: HamiConfig | str | Path | None = None,
    *,
    policy: Policy | str | None = None,
    policies: str | Path | None = None,
    registry: VendorRegistry | None = None,
    ledger: Ledger | None = None,
    mix: WorkloadMix | None = None,
) -> Engine:
    """The engine exactly as ``hami-devices schedule`` builds it.

    The inventory is completed by the vendor adapters (partition catalogs, split
    counts) loaded with ``config``; each adapter is its vendor's rule (rounding,
    memory factor, core capacity); the policy is ``policy``, else the configured
    one, with the user policies of ``policy-files`` and ``policies``.  With
    ``ledger`` its live allocations are booked (confirmed), as after a restart,
    and the workload mix it keeps is continued.
    """
    if not isinstance(config, HamiConfig):
        config = load_config(config) if config is not None else HamiConfig()
    registry = registry or load_vendors(config=config)
    if not isinstance(inventory, Inventory):
        inventory = load_inventory_for(inventory, registry, config)
    inventory = complete_inventory(configure_inventory(inventory, config), registry)
    cluster = ClusterState.from_inventory(inventory, rules=registry.adapters)
    engine = configure_engine(cluster, config, policy=policy, policies=policies, mix=mix)
    if ledger is not None:
        with ledger.reading() as view:
            cluster.sync(view.handles())
            kept = load_from(view)
        if cluster.conflicts:  # rows past a limit load all the same; each is recorded once for doctor
            with ledger.transaction() as view:
                note_conflicts(view, cluster.conflicts)
        if kept is not None:
            engine.use_learned_mix(kept)
    return engine


def configure_engine(
    cluster: ClusterState,
    config: HamiConfig,
    *,
    policy: Policy | str | None = None,
    policies: str | Path | None = None,
    mix: WorkloadMix | None = None,
) -> Engine:
    """An engine over ``cluster`` with the configuration's policies, defaults, user policies and workload mix.

    ``policy`` (a command line's ``--policy``) sets both levels; else ``scheduler.device-policy`` and
    ``scheduler.node-policy``, each defaulting to ``scheduler.policy``.  ``scheduler.default-*`` fill
    the parts that omit them; ``keep-cpu-tasks-off-accelerators`` taints the nodes with devices.
    ``scheduler.workload-mix``: a declared mix, or the online learner's settings and
    a saved learned mix to continue from; ``mix`` (a declared mix) overrides it.
    """
    sched = config.scheduler
    settings = sched.workload_mix
    if mix is None and settings.mode == "declared":
        mix = declared_mix([s.model_dump() for s in settings.shapes], source="scheduler.workload-mix")
    user = configured_policies(sched.policy_files, policies)
    device_policy = policy or sched.device_level_policy
    node_policy = policy or sched.node_level_policy
    cluster.taint_accelerators = sched.keep_cpu_tasks_off_accelerators
    engine = Engine(
        cluster,
        device_policy,
        node_policy=None if node_policy == device_policy else node_policy,
        user_policies=user,
        mix=mix,
        defaults=RequestDefaults.parse_memory(sched.default_memory, sched.default_cores, sched.default_count),
    )
    if mix is None and engine.learned_mix() is not None:
        engine.use_learned_mix(
            OnlineMix.load(settings.file)
            if settings.file
            else OnlineMix(half_life=settings.half_life, max_shapes=settings.max_shapes)
        )
    return engine
