"""From a placement decision to a grant, all or nothing, and exact release.

``allocate(devices, request)`` places the request with the scoring engine (the
configured policy, the same scorers and tie-breaks as ``hami-devices
schedule``) over the devices and the ledger's live allocations, then commits
that placement; ``allocate(devices, placement)`` commits a placement the
caller ranked; a request may be host-only (no parts).  Either way the commit
re-checks, inside the ledger transaction and against what the ledger holds at
that moment, every grant (``rules.evaluate``: the device's rule, then the
capacity rows) and every node row of every node the placement runs on
(selector, taints, schedulable, host CPU and memory), so a placement that went
stale is refused with its real code and nothing races past a limit, however
many schedulers share the ledger.  What the ledger holds is read into one
cluster state per device set (``booked``), by the ledger's change log: a commit
reads only what changed since the last one (``hami_devices.following``).  Hardware side
effects (partitions, limiter regions) happen inside that transaction too and
are undone if anything after them fails.

Every grant, refusal, release and eviction is recorded as a lifecycle event
(``hami_devices.ledger.lifecycle``): grants, releases and evictions in the same
ledger transaction as the change, so the event log and the allocations agree
after any crash; a refusal changes nothing, so its event is written on its own.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hami_devices.adapter import VendorAdapter
from hami_devices.config import HamiConfig
from hami_devices.device import Device, use_allocator
from hami_devices.device_sets import DeviceSet, booked, device_set
from hami_devices.engine_config import configure_engine
from hami_devices.errors import InsufficientResources, InvalidRequest, ReasonCode, UnknownAllocation
from hami_devices.following import mirror_commit
from hami_devices.inputs import as_request
from hami_devices.isolation import realise_group, remove_regions, with_core_policy
from hami_devices.ledger import Ledger, LedgerView, lifecycle
from hami_devices.models import DeviceHandle, Grant, ResourceRequest, group_key
from hami_devices.releasing import REVOKED_PREFIX, reclaim_revoked
from hami_devices.releasing import evict as evict  # released here before: callers import them from here
from hami_devices.releasing import release as release
from hami_devices.releasing import release_from as release_from
from hami_devices.releasing import undo_side_effects as undo_side_effects
from hami_devices.rules import HostDemand, evaluate
from hami_devices.scheduling import mix as mixes
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine, Placement
from hami_devices.scheduling.policies import Policy, configured_policies, resolve_policy
from hami_devices.sizing.reference import plan_environments

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger(__name__)


def coerce_request(request: ResourceRequest | Mapping[str, Any]) -> ResourceRequest:
    return as_request(request)


def engine_for(
    devices: Sequence[Device] | DeviceSet,
    view: LedgerView,
    *,
    policy: Policy | str | None = None,
    policies: str | Path | None = None,
    cluster: ClusterState | None = None,
) -> Engine:
    """The scoring engine over ``devices`` and the ledger's allocations, with the devices' configured policy,
    continuing from the workload mix the ledger keeps (see ``scheduling.mix``).

    The engine is kept with the device set and brought up to date with the ledger's allocations
    (``booked``; ``cluster``: what ``booked`` gave in this transaction already).  Call inside the ledger
    transaction: that serialises the engine's use.
    """
    kept = devices if isinstance(devices, DeviceSet) else device_set(devices)
    cluster = cluster or booked(kept, view)
    engine = kept.engines.get((str(policy), str(policies)))
    if engine is None:
        engine = configure_engine(cluster, kept.devices[0].adapter.config, policy=policy, policies=policies)
        kept.engines[(str(policy), str(policies))] = engine
    continue_mix(engine, view)
    return engine


def continue_mix(engine: Engine, view: LedgerView) -> None:
    """Continue ``engine``'s learned workload mix from the one the ledger keeps (when it learns one)."""
    if engine.learned_mix() is not None:
        learned = mixes.load_from(view)
        if learned is not None:
            engine.use_learned_mix(learned)


def allocate(
    devices: Sequence[Device],
    request: ResourceRequest | Mapping[str, Any] | Placement,
    *,
    policy: Policy | str | None = None,
    policies: str | Path | None = None,
    metadata: Mapping[str, str] | None = None,
    handle_id: str | None = None,
) -> DeviceHandle:
    """Grant ``request`` on ``devices``, all parts or none; ``Placement.grants == handle.grants``.

    A request is placed by the engine with ``policy`` (default: the configuration's
    ``scheduler.policy``); a ``Placement`` is committed exactly as ranked, or refused
    with ``InsufficientResources`` (``permanent=False``) if it no longer fits.
    ``metadata`` is the workload's identity (workload, namespace, pod, container,
    queue, owner, ...): kept on the handle and in the ledger, and carried by its
    events, the exporter's labels and the usage reports.
    ``handle_id`` fixes the allocation's id (default: a new one), so a caller that
    retries (a kubelet plugin) can find what an earlier attempt committed; an id that
    is already live is refused with ``InvalidRequest`` and nothing is granted.
    """
    if not devices:
        raise InsufficientResources("no devices to allocate from", permanent=True)
    return allocate_on(device_set(devices), request, policy=policy, policies=policies, metadata=metadata,
                       handle_id=handle_id)


def allocate_on(
    kept: DeviceSet,
    request: ResourceRequest | Mapping[str, Any] | Placement,
    *,
    policy: Policy | str | None = None,
    policies: str | Path | None = None,
    metadata: Mapping[str, str] | None = None,
    handle_id: str | None = None,
    engine: Engine | None = None,
) -> DeviceHandle:
    """``allocate`` on a device set; ``engine``: the engine that places a request (an engine built with a
    ledger, whose cluster is the set's), instead of the set's own engine for ``policy``."""
    ledger, adapters = kept.ledger, kept.adapters
    if not isinstance(request, Placement):
        request = coerce_request(request)
    identity = dict(metadata or {})
    try:
        with kept.lock:
            seen = 0
            if kept.others_wrote:
                # Others are committing too: what they committed since this set's last look is read
                # before the write lock, from a snapshot; inside it only what committed meanwhile is left.
                with ledger.reading() as view:
                    booked(kept, view, note=False)
                seen = kept.fetched
            placement, handle, generation = _allocate_in(kept, request, policy, policies, identity, handle_id,
                                                         engine)
            kept.others_wrote = seen + kept.fetched > 0
            if handle is not None:  # judged by every rule on exactly this state: booked as it is
                assert kept.cluster is not None
                mirror_commit(kept.cluster, ledger, handle, generation)
    except InsufficientResources as refusal:  # a given placement that no longer fits
        asked = request.request if isinstance(request, Placement) else request
        _record_refusal(ledger, asked, refusal, identity)
        raise
    if handle is None:  # the engine refused the request
        assert isinstance(placement, InsufficientResources) and not isinstance(request, Placement)
        _record_refusal(ledger, request, placement, identity)
        raise placement
    handle._ledger = ledger
    handle._adapters = adapters
    return handle


def _allocate_in(
    kept: DeviceSet,
    request: ResourceRequest | Placement,
    policy: Policy | str | None,
    policies: str | Path | None,
    identity: dict[str, str],
    handle_id: str | None,
    engine: Engine | None = None,
) -> tuple[Placement | InsufficientResources, DeviceHandle | None, int | None]:
    """``allocate``'s ledger transaction: the placement, the handle committed and the ledger's generation
    after it; or the engine's refusal, None and None (returned, not raised: what the engine learned from the
    request commits all the same)."""
    with kept.ledger.transaction() as view:
        if handle_id is not None and _live(view, handle_id):
            raise InvalidRequest("handle_id", f"allocation {handle_id!r} already exists")
        reclaim_revoked(view, kept.adapters, view.handle_ids_starting(REVOKED_PREFIX))
        cluster = booked(kept, view)
        if isinstance(request, Placement):
            _learn(view, kept.devices[0].adapter.config, request.request, policy, policies)
            placement: Placement | InsufficientResources = request
        else:
            if engine is None:
                engine = engine_for(kept, view, policy=policy, policies=policies, cluster=cluster)
            else:
                continue_mix(engine, view)
            engine.observe(request)  # this decides for the request: it teaches the mix, placed or not
            try:
                placement = engine.place(request)
            except InsufficientResources as exc:
                placement = exc
            learner = engine.learned_mix()
            if learner is not None:
                mixes.save_to(view, learner)
        if isinstance(placement, InsufficientResources):
            return placement, None, None
        handle = _commit(view, placement, kept, cluster, identity, handle_id)
        return placement, handle, view.generation()


def _learn(view: LedgerView, config: HamiConfig, request: ResourceRequest, policy: Policy | str | None,
           policies: str | Path | None) -> None:
    """A placement decided elsewhere still teaches the ledger's workload mix, as a request placed here would."""
    user = configured_policies(config.scheduler.policy_files, policies)
    named = [policy] if policy else [config.scheduler.device_level_policy, config.scheduler.node_level_policy]
    named += [p for p in (request.policy.device, request.policy.node) if p] if request.policy else []
    settings = config.scheduler.workload_mix
    if settings.mode != "online" or all(resolve_policy(p, user).weights.get("fragmentation", 0) <= 0 for p in named):
        return
    learner = mixes.load_from(view) or mixes.OnlineMix(half_life=settings.half_life, max_shapes=settings.max_shapes)
    learner.observe(request)
    mixes.save_to(view, learner)


def _commit(
    view: LedgerView,
    placement: Placement,
    kept: DeviceSet,
    cluster: ClusterState,
    identity: dict[str, str],
    handle_id: str | None,
) -> DeviceHandle:
    """Verify the placement's grants and host nodes, realise them and record the handle and its event,
    in ``view``."""
    grants = _verified(placement, kept.by_uuid, cluster)
    _host_verified(placement, cluster)
    # the host node is kept with the handle: a host-only (CPU and memory) placement has no grant to tell it
    fresh = DeviceHandle(request=placement.request, grants=grants, metadata=identity, node=placement.node)
    if handle_id is not None:
        fresh = fresh.model_copy(update={"id": handle_id})
    handle = _realise(fresh, kept.adapters, kept.prepare_on_node)
    try:
        view.add(handle)
        memory = {g.uuid: kept.by_uuid[g.uuid].info.memory_mib for g in handle.grants}
        view.record_event(lifecycle.granted(handle, memory, placement.policy))
    except BaseException:
        undo_side_effects(handle, kept.adapters)
        raise
    return handle


def _live(view: LedgerView, handle_id: str) -> bool:
    try:
        view.get(handle_id)
    except UnknownAllocation:
        return False
    return True


def _record_refusal(
    ledger: Ledger, request: ResourceRequest, refusal: InsufficientResources, metadata: Mapping[str, str]
) -> None:
    """Record a refusal; the caller gets the refusal even if the ledger cannot take the event."""
    try:
        ledger.record_event(lifecycle.refused(request, refusal, metadata))
    except Exception:  # the refusal is the answer; a lost event is logged, never raised in its place
        log.exception("could not record the refusal event")


def _verified(placement: Placement, by_uuid: Mapping[str, Device], cluster: ClusterState) -> list[Grant]:
    """The placement's grants, each re-derived by the one rule set on the ledger's current usage (``cluster``,
    in step with the ledger in this transaction)."""
    request = placement.request
    per_part = [0] * len(request.parts)
    seen: set[str] = set()
    stale: dict[str, list[ReasonCode]] = {}
    for grant in placement.grants:
        device = by_uuid.get(grant.uuid)
        if device is None:
            raise InvalidRequest("placement.grants", f"device {grant.uuid!r} is not among the devices given")
        if grant.uuid in seen or not 0 <= grant.part < len(request.parts):
            raise InvalidRequest("placement.grants", f"grant on {grant.uuid!r} repeats a device or names no part")
        seen.add(grant.uuid)
        per_part[grant.part] += 1
        usage = cluster.usage_of(grant.uuid)
        result = evaluate(device.info, device.adapter, request.parts[grant.part], grant.part, usage)
        if isinstance(result, list):
            stale[grant.uuid] = result
        elif result != grant:
            stale[grant.uuid] = [ReasonCode.PLACEMENT_STALE]
    short = [i for i, part in enumerate(request.parts) if per_part[i] != part.count]
    if short:
        raise InvalidRequest(f"placement.request.parts.{short[0]}", "the placement does not grant this part's count")
    if request.same_node and len({g.node for g in placement.grants}) > 1:
        raise InvalidRequest("placement.grants", "a same-node request placed on several nodes")
    if stale:
        label = request.name or "request"
        raise InsufficientResources(f"the placement of {label} no longer fits", stale, permanent=False)
    return list(placement.grants)


def _host_verified(placement: Placement, cluster: ClusterState) -> None:
    """Every node rule on every node the placement runs a process on (its host, and each grant's node),
    judged on what the ledger holds now: two schedulers with stale views cannot both take a node's CPU.

    A node no device of the set describes (a CPU-only node, hardware without an inventory) has no
    known host resources: only its name is checked against the devices' nodes.
    """
    request = placement.request
    nodes = list(dict.fromkeys([placement.node, *(g.node for g in placement.grants)]))
    unknown = [n for n in nodes if n not in cluster.nodes]
    if unknown and placement.grants:
        raise InvalidRequest("placement.node", f"node {unknown[0]!r} has none of the devices given")
    refused = cluster.host_refusals([n for n in nodes if n in cluster.nodes], HostDemand.of(request))
    if refused:
        label = request.name or "request"
        raise InsufficientResources(f"the placement of {label} no longer fits its node", refused, permanent=False)


def _realise(handle: DeviceHandle, adapters: Mapping[str, VendorAdapter], on_node: bool = False) -> DeviceHandle:
    """Create partitions and limiter regions, and one environment per (node, vendor) group; undo on failure.

    ``on_node``: the regions are left to the node that runs the workload (``handoff.prepare``), and each
    environment holds no path of this host (visible devices, precision plans)."""
    groups: dict[tuple[str, str], list[Grant]] = defaultdict(list)
    for grant in handle.grants:  # each grant keeps its cores as its part, else the configuration, says
        policed = with_core_policy(adapters[grant.vendor], handle.request.parts[grant.part], grant)
        groups[(grant.node, grant.vendor)].append(policed)
    prepared: dict[tuple[str, str], list[Grant]] = {}
    regions: dict[str, str] = {}
    environments: dict[str, dict[str, str]] = {}
    try:
        for (node, vendor), grants in groups.items():
            prepared[(node, vendor)] = adapters[vendor].prepare(grants)
        for (node, vendor), grants in prepared.items():
            key = group_key(node, vendor)
            if on_node:
                environments[key] = adapters[vendor].environment(grants, None)
                continue
            virtual = [handle.request.parts[g.part].virtual_memory for g in grants]
            region, environments[key] = realise_group(adapters[vendor], handle.id, node, grants, virtual)
            if region is not None:
                regions[key] = region
        if any(part.model_ref is not None for part in handle.request.parts):  # HAMI_PRECISION_PLAN
            for key, plan in plan_environments(handle).items():
                environments[key] = {**environments.get(key, {}), **plan}
    except BaseException:
        for (_, vendor), grants in prepared.items():
            adapters[vendor].teardown(grants)
        remove_regions(handle.model_copy(update={"regions": regions}))
        raise
    final_grants = [g for grants in prepared.values() for g in grants]
    final_grants.sort(key=lambda g: (g.part, handle.uuids.index(g.uuid)))
    return handle.model_copy(update={"grants": final_grants, "environments": environments, "regions": regions})


use_allocator(allocate, release_from)
