"""The extender's verbs over the engine and the ledger (no HTTP here: see ``server``).

- **filter** judges every candidate node with ``Engine.judge_nodes`` and returns *every*
  node where the pod fits now, so kube-scheduler keeps its own scoring and affinity;
  each other node gets its reason codes, in ``FailedAndUnresolvableNodes`` when the pod
  could not fit there even with the node empty (preemption would not help).
- **prioritize** returns the engine's score of each candidate node blended with the
  node's device occupancy in the policy's direction (``scores``), scaled to 0..10.
- **bind** is the only verb that commits: the engine places the pod on the chosen node,
  ``hd.allocate`` re-checks that placement with the one rule set inside the ledger
  transaction and commits it under an id fixed by the pod's UID, then the
  ``PodBinder`` annotates and binds the pod.  See ``leases`` for why nothing can leak.
- **preempt** asks a ``VictimSearch`` per node.

Threads: one lock guards the cluster state and its engines (decisions take
milliseconds); an in-process lock queues this process's ledger transactions (SQLite's
busy handler sleeps up to 100 ms between tries); a per-pod lock keeps two binds of the
same pod, or a bind and the reaper, apart.  Lock order: pod, ledger, state.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from itertools import compress
from pathlib import Path
from typing import Any

from hami_devices.allocation import allocate
from hami_devices.assembly import build_engine
from hami_devices.config import HamiConfig
from hami_devices.device import Device
from hami_devices.discovery import complete_inventory, discover, load_inventory_for
from hami_devices.errors import HamiError, InsufficientResources, UnknownAllocation
from hami_devices.inputs import as_config
from hami_devices.inventory import Inventory
from hami_devices.kubernetes.extender import leases, wire
from hami_devices.kubernetes.extender.deadline import Deadline
from hami_devices.kubernetes.extender.kube import BindFailed, PodBinder
from hami_devices.kubernetes.extender.pods import PodRef, PodRequest, asks_for_devices, pod_ref, pod_request
from hami_devices.kubernetes.extender.preempt import LowestPriorityVictims, VictimSearch
from hami_devices.kubernetes.extender.scores import node_scores, scaled
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceHandle, ResourceRequest
from hami_devices.registry import load_vendors
from hami_devices.scheduling.cluster import PlacementState

UNKNOWN_NODE = "UnknownNode"
BIND_ATTEMPTS = 3
POD_CACHE = 20_000


class Extender:
    """The verbs, each taking and returning the wire format's JSON (as Python objects)."""

    def __init__(
        self,
        inventory: str | Path | Inventory,
        ledger: Ledger,
        binder: PodBinder,
        config: HamiConfig | Mapping[str, Any] | str | Path | None = None,
        *,
        policy: str | None = None,
        lease_s: float = 30.0,
        victims: VictimSearch | None = None,
    ) -> None:
        config = as_config(config)
        registry = load_vendors(config=config)
        if not isinstance(inventory, Inventory):
            inventory = load_inventory_for(inventory, registry, config)
        inventory = complete_inventory(inventory, registry)
        self.config = config
        self.ledger = ledger
        self.binder = binder
        self.lease_s = lease_s
        self.engine = build_engine(inventory, config, policy=policy, registry=registry)
        self.cluster = self.engine.cluster
        devices = discover(inventory, config=config, ledger=ledger, registry=registry)
        self.devices: dict[str, list[Device]] = {}
        for device in devices:
            self.devices.setdefault(device.info.node, []).append(device)
        self.adapters = {d.info.vendor: d.adapter for d in devices}
        self.victim_search: VictimSearch = victims or LowestPriorityVictims(
            lambda: self.cluster, lambda: self.engine.policy
        )
        self._state = threading.RLock()
        self._ledger_lock = threading.Lock()
        self._pod_locks: dict[str, tuple[threading.Lock, int]] = {}  # uid -> (lock, holders and waiters)
        self._pod_locks_guard = threading.Lock()
        self._pods: OrderedDict[str, PodRequest | None] = OrderedDict()
        self._models: tuple[int, dict[str, set[str]], dict[str, list[str]]] = (-1, {}, {})
        self.resync()

    # ------------------------------------------------------------------ filter / prioritize
    def filter(self, body: Any) -> dict[str, Any]:
        args = wire.parse_args(body)
        pod = self._request_of(args.pod)
        if pod is None:
            return wire.filter_result(args, args.node_names, {}, {})
        names = args.node_names
        with self._state:
            missing = (self.cluster.node_rows(names) < 0).tolist()
            known = list(compress(names, [not m for m in missing])) if any(missing) else names
            verdict = self.engine.judge_nodes(pod.request, known, scores=False)
        unresolvable: dict[str, str] = dict.fromkeys(
            compress(names, missing), f"{UNKNOWN_NODE}: not in the extender's inventory"
        )
        # A thousand failed nodes share a handful of code lists: one text per list, then C-level zips.
        texts = [", ".join(codes) for codes in verdict.patterns]
        pairs = list(zip(verdict.failed, map(texts.__getitem__, verdict.pattern_of), strict=True))
        if any(verdict.never):
            failed = dict(compress(pairs, [not n for n in verdict.never]))
            unresolvable.update(compress(pairs, verdict.never))
        else:
            failed = dict(pairs)
        return wire.filter_result(args, verdict.feasible, failed, unresolvable)

    def prioritize(self, body: Any) -> list[dict[str, Any]]:
        args = wire.parse_args(body)
        pod = self._request_of(args.pod)
        if pod is None:  # not ours: no opinion, so kube-scheduler's own scores decide
            return wire.priorities(dict.fromkeys(args.node_names, wire.MIN_PRIORITY))
        names = args.node_names
        with self._state:
            missing = (self.cluster.node_rows(names) < 0).tolist()
            known = list(compress(names, [not m for m in missing])) if any(missing) else names
            verdict = self.engine.judge_nodes(pod.request, known, scores=True)
            # the node policy decides between nodes: its fit scorer's direction blends in how full each node is
            node_scoring = self.engine.levels(pod.request)[1]
            scores = node_scores(self.cluster, node_scoring.weights, verdict.scores)
        return wire.priorities(scaled(scores, args.node_names))

    # ------------------------------------------------------------------ preempt
    def preempt(self, body: Any) -> dict[str, Any]:
        args = wire.parse_preemption(body)
        pod = self._request_of(args.pod)
        if pod is None:  # our devices are not the constraint: kube-scheduler's victims stand
            return wire.preemption_result(args.victims, args.pdb_violations)
        out: dict[str, list[str]] = {}
        with self._state:
            for node, proposed in args.victims.items():
                found = self.victim_search.victims(pod, node, proposed)
                if found is not None:
                    out[node] = found
        return wire.preemption_result(out, args.pdb_violations)

    # ------------------------------------------------------------------ bind
    def bind(self, body: Any, deadline: Deadline | None = None) -> dict[str, Any]:
        args = wire.parse_binding(body)
        ref = PodRef(args.pod_namespace, args.pod_name, args.pod_uid)
        with self._pod_lock(ref.uid):
            return wire.binding_result(self._bind(ref, args.node, deadline))

    def _bind(self, ref: PodRef, node: str, deadline: Deadline | None) -> str:
        hid = leases.handle_id(ref.uid)
        existing = self._live(hid)
        if existing is not None:
            if leases.node_of(existing) == node:  # a retry of a bind that committed: finish it, commit nothing new
                if not leases.pending(existing):
                    return ""
                return self._publish(ref, node, existing, deadline, release_on_failure=False)
            if not leases.pending(existing):
                return f"pod {ref.label} is already bound to {leases.node_of(existing)}"
            self._release(existing, still=leases.pending)  # an earlier bind elsewhere that never completed
        pod = self._pods.get(ref.uid)
        if pod is None and ref.uid not in self._pods:
            found = self.binder.read_pod(ref)
            if found is None:
                return f"pod {ref.label} ({ref.uid}) was not filtered by this extender; schedule it again"
            pod = self._request_of(found)
        if pod is None:  # asks nothing of ours: bind it as kube-scheduler would
            return self._publish(ref, node, None, deadline, release_on_failure=False)
        if node not in self.devices:
            return f"{UNKNOWN_NODE}: node {node!r} is not in the extender's inventory"
        handle, error = self._commit(pod, node, hid)
        if handle is None:
            return error
        return self._publish(ref, node, handle, deadline, release_on_failure=True)

    def _commit(self, pod: PodRequest, node: str, hid: str) -> tuple[DeviceHandle | None, str]:
        """Place on ``node``, reserve it in the cluster state, commit through the ledger; retried when stale."""
        error = ""
        for _ in range(BIND_ATTEMPTS):
            with self._state:
                engine = self.engine
                request = leases.leased(_pinned(pod.request, self.devices[node]), time.time() + self.lease_s)
                engine.observe(request)  # the bind decides for the pod: it teaches the mix, placed or not
                try:
                    placement = engine.place(request)
                except InsufficientResources as exc:
                    return None, refusal(pod.pod.label, node, exc)
                assumed = engine.assume(placement)
            try:
                with self._ledger_lock:
                    handle = allocate(self.devices[node], placement, handle_id=hid)
                    with self._state:
                        self.cluster.forget(assumed.id)
                        self._mirror(handle)
                return handle, ""
            except InsufficientResources as exc:  # another writer changed the ledger since we looked
                error = refusal(pod.pod.label, node, exc)
                with self._state:
                    self.cluster.forget(assumed.id)
                self.resync()
            except BaseException:
                with self._state:
                    self.cluster.forget(assumed.id)
                raise
        return None, error

    def _publish(
        self,
        ref: PodRef,
        node: str,
        handle: DeviceHandle | None,
        deadline: Deadline | None,
        *,
        release_on_failure: bool,
    ) -> str:
        """Annotate and bind the pod (past the point of no return), then mark the allocation bound."""
        if deadline is not None and not deadline.claim():
            if handle is not None and release_on_failure:
                self._release(handle)
            return f"binding {ref.label} timed out before it reached the API server; nothing was committed"
        try:
            self.binder.bind(ref, node, pod_annotations(handle, node) if handle is not None else {})
        except BindFailed as exc:
            if self.binder.bound_node(ref) != node:  # the answer was lost but the binding may have happened
                if handle is not None and release_on_failure:
                    self._release(handle)
                return str(exc)
        if handle is not None and leases.pending(handle):
            with self._ledger_lock:
                leases.mark_bound(self.ledger, handle)
        return ""

    # ------------------------------------------------------------------ ledger upkeep
    def reap(self, now: float | None = None) -> dict[str, int]:
        """Settle allocations whose bind lease ran out (bound after all, or released) and release those of pods
        that are gone.  Runs at start-up and periodically; never releases on an unanswered question."""
        now = time.time() if now is None else now
        counts = {"released": 0, "confirmed": 0, "gone": 0}
        live = self.binder.live_pods()
        with self.ledger.reading() as view:
            handles = view.handles()
        for handle in handles:
            ref = leases.pod_of(handle)
            if ref is None:
                continue
            with self._pod_lock(ref.uid):
                if leases.pending(handle):
                    if not leases.expired(handle, now):
                        continue
                    if self.binder.bound_node(ref) == leases.node_of(handle):
                        with self._ledger_lock:
                            counts["confirmed"] += leases.mark_bound(self.ledger, handle)
                    elif self._release(handle, still=lambda h: leases.pending(h) and leases.expired(h, now)):
                        counts["released"] += 1
                elif live is not None and ref.uid not in live and self._release(handle):
                    counts["gone"] += 1
        return counts

    def resync(self) -> None:
        """Make the cluster state's confirmed bookings exactly the ledger's allocations (another writer, a restart)."""
        with self._ledger_lock:
            with self.ledger.reading() as view:
                handles = {h.id: h for h in view.handles()}
            with self._state:
                for booking in list(self.cluster.bookings.values()):
                    if booking.state == PlacementState.CONFIRMED and booking.id not in handles:
                        self.cluster.forget(booking.id)
                for handle in handles.values():
                    self._mirror(handle)

    def _mirror(self, handle: DeviceHandle) -> None:
        """Book a ledger allocation in the cluster state (once; grants on devices we do not know are ignored)."""
        if handle.id in self.cluster.bookings:
            return
        grants = [g for g in handle.grants if g.uuid in self.cluster.uuid_index]
        if not grants:
            return
        # A clash with a placement assumed here (which will itself fail at commit) waits for the next resync.
        with suppress(HamiError):
            self.cluster.book(handle.model_copy(update={"grants": grants}))

    def _release(self, handle: DeviceHandle, still: Callable[[DeviceHandle], bool] = lambda h: True) -> bool:
        with self._ledger_lock:
            released = leases.release_if(self.ledger, handle, self.adapters, still)
        if released:
            with self._state:
                if handle.id in self.cluster.bookings:
                    self.cluster.forget(handle.id)
        return released

    def _live(self, hid: str) -> DeviceHandle | None:
        # A read, not a transaction: Ledger.get would take SQLite's write lock outside ``_ledger_lock`` and
        # collide with another bind's commit, whose loser sleeps in the busy handler.
        try:
            with self.ledger.reading() as view:
                return view.get(hid)
        except UnknownAllocation:
            return None

    # ------------------------------------------------------------------ helpers
    def _request_of(self, pod: Mapping[str, Any]) -> PodRequest | None:
        """The pod's request (None when it asks nothing of ours), remembered by UID for bind."""
        ref = pod_ref(pod)
        found = pod_request(pod, self._models_matching) if asks_for_devices(pod) else None
        with self._pod_locks_guard:
            self._pods[ref.uid] = found
            self._pods.move_to_end(ref.uid)
            while len(self._pods) > POD_CACHE:
                self._pods.popitem(last=False)
        return found

    def _models_matching(self, term: str) -> list[str]:
        """HAMi's type match: every model whose name or alias contains ``term``, case-insensitively."""
        layout = self.cluster.layout_version
        if self._models[0] != layout:
            names: dict[str, set[str]] = {}
            with self._state:
                for info in self.cluster.infos:
                    if info is None or info.model in names:
                        continue
                    aliases = [info.model, *([info.traits.model, *info.traits.aliases] if info.traits else [])]
                    names[info.model] = {a.lower() for a in aliases}
            self._models = (layout, names, {})
        memo = self._models[2]
        found = memo.get(term)
        if found is None:
            lowered = term.lower()
            found = memo[term] = [m for m, aliases in self._models[1].items() if any(lowered in a for a in aliases)]
        return list(found) or [term]

    @contextmanager
    def _pod_lock(self, uid: str) -> Iterator[None]:
        with self._pod_locks_guard:
            lock, users = self._pod_locks.get(uid, (threading.Lock(), 0))
            self._pod_locks[uid] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._pod_locks_guard:
                lock, users = self._pod_locks[uid]
                if users == 1:
                    del self._pod_locks[uid]
                else:
                    self._pod_locks[uid] = (lock, users - 1)


def _pinned(request: ResourceRequest, devices: Sequence[Device]) -> ResourceRequest:
    """The request limited to one node's devices (each part keeps its own uuid list, narrowed)."""
    here = [d.uuid for d in devices]
    parts = []
    for part in request.parts:
        uuids = [u for u in here if u in set(part.uuids)] if part.uuids else here
        parts.append(part.model_copy(update={"uuids": uuids or ["<none on this node>"]}))
    return request.model_copy(update={"parts": parts})


def pod_annotations(handle: DeviceHandle, node: str) -> dict[str, str]:
    """What the node side needs, written on the pod: the allocation id, its grants and the workload environment."""
    grants = [
        {k: v for k, v in g.model_dump(mode="json").items() if k in (
            "uuid", "vendor", "model", "index", "memory_mib", "cores", "exclusive", "partition", "partition_uuid")}
        for g in handle.grants
    ]
    return {
        "hami-devices.io/handle": handle.id,
        "hami-devices.io/node": node,
        "hami-devices.io/grants": json.dumps(grants, separators=(",", ":")),
        "hami-devices.io/environments": json.dumps(handle.environments, separators=(",", ":"), sort_keys=True),
    }


def refusal(label: str, node: str, exc: InsufficientResources) -> str:
    """Why a bind found no room: the node's reason codes (the request was pinned to its devices)."""
    codes = [str(c) for c in exc.reasons.get(node, [])] or sorted(str(c) for c in exc.codes)
    when = "never on this node" if exc.permanent else "until capacity frees"
    return f"{label} does not fit {node} ({when}): {', '.join(codes)}"
