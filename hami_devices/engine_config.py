"""An engine over a cluster state, configured: the policies, defaults, user policies and workload mix of a
``HamiConfig`` (policy files and a saved mix are read here).  ``assembly`` builds the cluster state it runs
on; ``hd.allocate`` configures one per device set."""

from __future__ import annotations

from pathlib import Path

from hami_devices.config import HamiConfig
from hami_devices.models import RequestDefaults
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.mix import OnlineMix, declared_mix
from hami_devices.scheduling.policies import Policy, configured_policies


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
