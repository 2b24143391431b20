"""The scoring engine: filter, score, select, on arrays over the whole cluster.

``Engine(cluster, policy).rank(request)`` is a pure function of the cluster
state and the request: it returns placements, best first, each with the
per-scorer breakdown that ranked it.  ``place`` returns the best or raises
``InsufficientResources`` with the reason codes of every rejected node and
device; ``schedule`` also books the placement in the cluster (assumed).

1. **Filter** (vectorised per request part): each device gets the first
   reason code it fails (vendor, model, uuid lists, health, precision, NUMA,
   partition, exclusivity, split count, memory, cores); each node the codes
   of host CPU/memory, device count and required topology.
2. **Score**: every scorer of the policy scores every surviving device
   (0..100); per node the best ``count`` devices form the part's set, and
   for multi-device parts the set is grown greedily from each seed device by
   pair score (topology), so 8-device nodes never enumerate combinations.
3. **Select**: highest weighted score; ties go to the lexically smaller node
   name and then device rows, so the result never depends on dict order.

Multi-part requests are placed together or not at all: with ``same_node``
all parts go to one node with disjoint devices; otherwise each part picks its
best node in turn, and host CPU/memory are charged to the first part's node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from hami_devices.config import HamiConfig
from hami_devices.errors import InsufficientResources, InvalidConfig, InvalidRequest, ReasonCode
from hami_devices.inventory import Inventory
from hami_devices.models import PRECISIONS, Grant, RequestPart, ResourceRequest
from hami_devices.registry import load_scorers
from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.policies import Policy, resolve_policy
from hami_devices.scheduling.scorers.base import HostContext, ScoreContext, Scorer
from hami_devices.traits import normalize_model_name

if TYPE_CHECKING:
    from hami_devices.ledger import Ledger
    from hami_devices.registry import VendorRegistry
    from hami_devices.scheduling.mix import OnlineMix
    from hami_devices.scheduling.verdicts import NodeVerdicts

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Device reason codes in the order they are reported (the first failing wins).
DEVICE_CODES: tuple[ReasonCode, ...] = (
    ReasonCode.CARD_VENDOR_MISMATCH,
    ReasonCode.CARD_TYPE_MISMATCH,
    ReasonCode.CARD_UUID_MISMATCH,
    ReasonCode.CARD_UNHEALTHY,
    ReasonCode.CARD_PRECISION_UNSUPPORTED,
    ReasonCode.CARD_NUMA_MISMATCH,
    ReasonCode.CARD_PARTITION_UNAVAILABLE,
    ReasonCode.CARD_EXCLUSIVELY_HELD,
    ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE,
    ReasonCode.CARD_SPLIT_EXHAUSTED,
    ReasonCode.CARD_INSUFFICIENT_MEMORY,
    ReasonCode.CARD_INSUFFICIENT_CORE,
)
_PRECISION = {p: i for i, p in enumerate(PRECISIONS)}
SEARCH_NODES = 8  # multi-device/multi-part parts: nodes examined in depth, best device scores first


@dataclass
class Placement:
    """One way to place a request, with why it ranks where it does."""

    request: ResourceRequest
    node: str  # the node that hosts the task (host CPU/memory)
    grants: list[Grant]
    score: float
    breakdown: dict[str, float]  # scorer -> 0..100 (device-count weighted over parts)
    weights: dict[str, float]
    policy: str
    booking_id: str | None = None

    @property
    def nodes(self) -> list[str]:
        return sorted({g.node for g in self.grants})

    def to_dict(self) -> dict[str, Any]:
        return {
            "request": self.request.name,
            "node": self.node,
            "policy": self.policy,
            "score": round(self.score, 3),
            "breakdown": {k: round(v, 3) for k, v in self.breakdown.items()},
            "weights": self.weights,
            "grants": [g.model_dump(mode="json") for g in self.grants],
            "booking_id": self.booking_id,
        }


@dataclass
class _PartEval:
    """One part filtered and scored over the cluster."""

    part: RequestPart
    index: int
    rows: IntArray  # candidate rows (passed the filters)
    memory: IntArray  # MiB on each candidate
    grants: dict[int, Grant]  # row -> the grant its rule planned (devices not evaluated over arrays)
    device_total: FloatArray  # weighted device score per candidate
    per_scorer: dict[str, FloatArray]
    ctx: ScoreContext
    nodes: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # node row per candidate
    # (live rows, code per row: -1 ok, else DEVICE_CODES index), computed only when explaining
    explain: Callable[[], tuple[IntArray, IntArray]] | None = None

    @cached_property
    def rejected(self) -> dict[int, ReasonCode]:
        """Row -> first failing reason code (built only when explaining, in the same decision)."""
        if self.explain is None:
            return {}
        all_rows, codes = self.explain()
        bad = codes >= 0
        return {int(r): DEVICE_CODES[int(k)] for r, k in zip(all_rows[bad], codes[bad], strict=True)}


@dataclass
class _Choice:
    rows: list[int]
    score: float
    per_scorer: dict[str, float]


class Engine:
    def __init__(
        self,
        cluster: ClusterState,
        policy: Policy | str = "binpack",
        *,
        scorers: Mapping[str, Scorer] | None = None,
        mix: WorkloadMix | None = None,
        user_policies: Mapping[str, Policy] | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = resolve_policy(policy, dict(user_policies or {}))
        self.weights = {k: v for k, v in self.policy.weights.items() if v > 0}
        self.scorers = dict(scorers) if scorers is not None else load_scorer_plugins(self.weights)
        missing = [k for k in self.weights if k not in self.scorers]
        if missing:
            raise InvalidConfig("weights", f"policy {self.policy.name!r} names unknown scorers: {missing}")
        self.mix = mix
        self._total_weight = sum(self.weights.values())
        # scorers whose set score is the default mean of their device scores
        self._mean_set = {k for k in self.weights if type(self.scorers[k]).score_set is Scorer.score_set}
        self._masks: dict[tuple[Any, ...], BoolArray] = {}
        self._mask_layout = (-1, -1)

    @classmethod
    def from_config(
        cls,
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
        ``ledger`` its live allocations are booked (confirmed), as after a restart.
        """
        from hami_devices.config import load_config
        from hami_devices.discovery import complete_inventory, load_inventory_for
        from hami_devices.registry import load_vendors

        if not isinstance(config, HamiConfig):
            config = load_config(config) if config is not None else HamiConfig()
        registry = registry or load_vendors(config=config)
        if not isinstance(inventory, Inventory):
            inventory = load_inventory_for(inventory, registry, config)
        inventory = complete_inventory(inventory, registry)
        cluster = ClusterState.from_inventory(inventory, rules=registry.adapters)
        engine = cls.configured(cluster, config, policy=policy, policies=policies, mix=mix)
        if ledger is not None:
            from hami_devices.scheduling.mix import load_from

            with ledger.reading() as view:
                cluster.sync(view.handles())
                kept = load_from(view)
            if kept is not None:
                engine.use_learned_mix(kept)
        return engine

    @classmethod
    def configured(
        cls,
        cluster: ClusterState,
        config: HamiConfig,
        *,
        policy: Policy | str | None = None,
        policies: str | Path | None = None,
        mix: WorkloadMix | None = None,
    ) -> Engine:
        """An engine over ``cluster`` with the configuration's policy, user policies and workload mix.

        ``scheduler.workload-mix``: a declared mix, or the online learner's settings and
        a saved learned mix to continue from; ``mix`` (a declared mix) overrides it.
        """
        from hami_devices.scheduling.mix import OnlineMix, declared_mix
        from hami_devices.scheduling.policies import configured_policies
        from hami_devices.scheduling.scorers.fragmentation import FragmentationScorer

        settings = config.scheduler.workload_mix
        if mix is None and settings.mode == "declared":
            mix = declared_mix([s.model_dump() for s in settings.shapes], source="scheduler.workload-mix")
        user = configured_policies(config.scheduler.policy_files, policies)
        engine = cls(cluster, policy or config.scheduler.policy, user_policies=user, mix=mix)
        scorer = engine.scorers.get("fragmentation")
        if isinstance(scorer, FragmentationScorer) and mix is None:
            scorer.online = (
                OnlineMix.load(settings.file)
                if settings.file
                else OnlineMix(half_life=settings.half_life, max_shapes=settings.max_shapes)
            )
        return engine

    def use_learned_mix(self, learner: OnlineMix) -> None:
        """Continue from ``learner`` (a mix saved by a scheduler, or kept in a ledger)."""
        from hami_devices.scheduling.scorers.fragmentation import FragmentationScorer

        scorer = self.scorers.get("fragmentation")
        if isinstance(scorer, FragmentationScorer):
            scorer.online = learner

    def learned_mix(self) -> OnlineMix | None:
        """The workload mix the fragmentation scorer has learned (save it with ``.save(path)``), if it learns."""
        from hami_devices.scheduling.scorers.fragmentation import FragmentationScorer

        scorer = self.scorers.get("fragmentation")
        return scorer.online if isinstance(scorer, FragmentationScorer) else None

    # ------------------------------------------------------------------ public
    def rank(self, request: ResourceRequest, limit: int = 5) -> list[Placement]:
        placements, _ = self._rank(request, limit)
        return placements

    def place(self, request: ResourceRequest) -> Placement:
        """The best placement, or ``InsufficientResources`` with the reasons, the nearest misses and
        whether the request could fit this cluster at all (``permanent``)."""
        self.observe(request)
        placements, reasons = self._rank(request, 1)
        if not placements:
            raise self.refusal(request, reasons)
        return placements[0]

    def try_place(
        self, request: ResourceRequest, *, candidates: Sequence[BoolArray | None] | None = None
    ) -> Placement | None:
        """The best placement, or None; builds no explanation (for replays and tight loops).

        ``candidates``: per part, None or a boolean mask over the cluster's device rows (at least
        ``cluster.size`` long); the part may use only rows where it is True, exactly as if its
        ``uuids`` listed just those devices.  For callers that narrow parts to the same large sets
        of devices again and again (DRA selectors), where a uuid list costs more than the decision.
        """
        if candidates is not None and len(candidates) != len(request.parts):
            raise InvalidRequest("candidates", f"{len(candidates)} masks for {len(request.parts)} parts")
        self.observe(request)
        placements, _ = self._rank(request, 1, explain=False, candidates=candidates)
        return placements[0] if placements else None

    def refusal(
        self, request: ResourceRequest, reasons: dict[str, list[ReasonCode]] | None = None
    ) -> InsufficientResources:
        """The error for a request that does not fit now: reasons per node and device, nearest misses, permanence."""
        from hami_devices.scheduling.refusal import explain_refusal

        if reasons is None:
            reasons = self.rejections(request)
        return explain_refusal(self, request, reasons)

    def observe(self, request: ResourceRequest) -> None:
        """Tell the scorers a request was asked for (``place`` and ``try_place`` do; learning scorers learn)."""
        for scorer in self.scorers.values():
            scorer.observe(request)

    def schedule(self, request: ResourceRequest) -> Placement:
        """Place and book (assume) in the cluster."""
        placement = self.place(request)
        booking = self.book(placement)
        placement.booking_id = booking.id
        return placement

    def book(self, placement: Placement) -> Booking:
        r = placement.request
        return self.cluster.assume(
            placement.node,
            placement.grants,
            host_cpu_milli=r.host_cpu_milli,
            host_memory_mib=r.host_memory_mib,
            preemptible=r.preemptible,
            request=r,
        )

    def feasible(self, part: RequestPart, index: int = 0) -> dict[str, Grant]:
        """Every device that could take ``part`` now, with the grant it would get (device rules only:
        no node, host or topology judgement).  What ``accounting.evaluate`` says device by device."""
        request = ResourceRequest(parts=[part])
        ev = self._filter(part, index, request)
        grants = (self._grant_at(ev, p) for p in range(ev.rows.size))
        return {g.uuid: g for g in grants}

    def _grant_at(self, ev: _PartEval, position: int) -> Grant:
        """The grant of candidate ``position``: its rule's plan, or the plain share."""
        row = int(ev.rows[position])
        planned = ev.grants.get(row)
        if planned is not None:
            return planned
        info, part = self.cluster.info(row), ev.part
        return Grant.on(info, ev.index, int(ev.memory[position]), part.cores, exclusive=part.exclusive)

    def judge_nodes(
        self, request: ResourceRequest, nodes: Sequence[str] | None = None, *, scores: bool = True
    ) -> NodeVerdicts:
        """Per node of ``nodes`` (default: all): whether the request fits now and its score there, else its
        reason codes and whether it could ever fit there; over arrays, for schedulers that choose the node
        themselves (a kube-scheduler extender's filter and prioritize)."""
        from hami_devices.scheduling.verdicts import judge_nodes

        return judge_nodes(self, request, nodes, scores=scores)

    def rejections(self, request: ResourceRequest) -> dict[str, list[ReasonCode]]:
        """Reason codes per node (and per rejected device uuid) for ``--explain``."""
        return self._rank(request, 0)[1]

    # ------------------------------------------------------------------ filter
    def _static_mask(self, key: tuple[Any, ...], build: Callable[[], BoolArray]) -> BoolArray:
        """A mask over rows [0, size) that depends only on static device columns, cached per layout."""
        c = self.cluster
        if self._mask_layout != (c.layout_version, c.size):
            self._masks.clear()
            self._mask_layout = (c.layout_version, c.size)
        mask = self._masks.get(key)
        if mask is None:
            mask = self._masks[key] = build()
        return mask

    def _static_ok(self, part: RequestPart) -> BoolArray:
        """Rows [0, size) whose static facts match the part (vendor, model, uuid, precision, NUMA lists).

        The same matching as ``matching.static_reasons``, over arrays; masks that depend
        only on device facts are cached per cluster layout.
        """
        c = self.cluster
        size = c.size
        ok = np.ones(size, dtype=bool)
        if part.precision is not None:
            p = _PRECISION[part.precision]
            ok &= self._static_mask(("precision", p), lambda: ~(c.has_traits[:size] & (c.tflops[:size, p] <= 0)))
        if part.vendors or part.exclude_vendors:
            vendors = (tuple(part.vendors), tuple(part.exclude_vendors))
            ok &= self._static_mask(("vendor", vendors), lambda: ~self._vendor_bad(part, c.vendor[:size]))
        if part.models or part.exclude_models:
            models = (tuple(part.models), tuple(part.exclude_models))
            ok &= self._static_mask(("model", models), lambda: ~self._model_bad(part, c.model[:size]))
        if part.uuids or part.exclude_uuids:
            ok &= ~self._uuid_mask(part, np.arange(size))
        if part.numa_node is not None:
            ok &= c.numa[:size] == part.numa_node
        return ok

    def _filter(
        self,
        part: RequestPart,
        index: int,
        request: ResourceRequest,
        candidates: BoolArray | None = None,
        *,
        host_ok: BoolArray | None = None,
        scored: bool = True,
    ) -> _PartEval:
        """Candidate devices of one part, scored (``scored=False``: every score 0, for feasibility alone).

        ``candidates``: a mask over device rows the part is further limited to (see ``try_place``).

        Devices whose rule gives plain shares (``ClusterState.plain``) are judged with
        one conjunction over rows [0, size): the incrementally kept ``ready`` column
        (alive, healthy, schedulable, not exclusive, a sharer slot left), free memory
        and cores, and cached masks of the static constraints; this is the accounting
        rules over arrays.  Every other device (and every device for a part that names
        a partition) is asked through its rule (``ClusterState.planned``), exactly as
        the allocator does.  With ``host_ok`` (per node row; when placing) devices on nodes
        without the request's host CPU and memory, or with fewer candidates than the part's
        count, are no candidates either, so scorers that judge the candidates as a whole
        (fragmentation's pool, min-max scalings) see only what can be chosen.  The
        per-device reason codes are only computed when explaining.
        """
        c = self.cluster
        size = c.size
        ok = c.ready[:size] & self._static_ok(part)
        if host_ok is not None:
            ok &= host_ok[c.node[:size]]
        if candidates is not None:
            ok &= candidates[:size]
        grants: dict[int, Grant] = {}
        if part.partition is None:
            plain = ok & c.plain[:size] & (c.cores_used[:size] <= c.core_cap[:size] - part.cores)
            if part.exclusive:
                plain &= c.sharers[:size] == 0
            if part.memory_mib is not None:
                plain &= c.mem_free[:size] >= part.memory_mib
                cand = np.flatnonzero(plain)
                memory = np.full(cand.size, part.memory_mib, dtype=np.int64)
            else:
                pre = np.flatnonzero(plain)
                need = self._memory_need(part, c.mem_total[pre])
                fits = c.mem_used[pre] + need <= c.mem_cap[pre]
                cand = pre[fits]
                memory = need[fits]
            asked = np.flatnonzero(ok & ~c.plain[:size]) if not c.plain[:size].all() else np.zeros(0, np.int64)
        else:
            cand = np.zeros(0, dtype=np.int64)
            memory = np.zeros(0, dtype=np.int64)
            asked = np.flatnonzero(ok)
        cores: IntArray | None = None
        if asked.size:
            memo = c.plan_rows(asked, part, part.model_dump_json(), index)
            extra = asked[memo.ok[asked]]
            if extra.size:
                # Only rows whose rule plans are ever asked for a part without a partition, so the memo's
                # grants hold every planned candidate's current grant and nothing for a plain candidate.
                grants = memo.grants
                order = np.argsort(np.concatenate([cand, extra]), kind="stable")
                cand = np.concatenate([cand, extra])[order]
                memory = np.concatenate([memory, memo.memory[extra]]).astype(np.int64)[order]
                plain_cores = np.full(order.size - extra.size, part.cores, np.int64)
                cores = np.concatenate([plain_cores, memo.cores[extra]])[order]
        if host_ok is not None and part.count > 1 and cand.size:  # placing: a node with too few is no candidate
            enough = np.bincount(c.node[cand], minlength=len(c.node_names))[c.node[cand]] >= part.count
            if not enough.all():
                # ``grants`` may keep rows dropped here: it is only looked up by candidate row.
                cand, memory = cand[enough], memory[enough]
                cores = None if cores is None else cores[enough]
        ctx = ScoreContext(c, request, part, index, cand, memory, self.mix, cores)
        per_scorer: dict[str, FloatArray] = {}
        device_total = np.zeros(cand.size)
        weighted = np.empty(cand.size)  # one scratch array: large temporaries cost page faults
        for name, w in self.weights.items() if scored else ():
            const = self.scorers[name].constant(ctx) if cand.size else None
            if const is not None:
                # Same values as clipping a full array of ``const`` and adding w * it elementwise.
                value = min(max(float(const), 0.0), 100.0)
                per_scorer[name] = np.full(cand.size, value)
                device_total += w * value
                continue
            if cand.size:
                raw = np.asarray(self.scorers[name].score(ctx), dtype=np.float64)
                score = np.maximum(raw, 0.0)
                np.minimum(score, 100.0, out=score)  # == np.clip(raw, 0, 100), cheaper
            else:
                score = np.zeros(0)
            per_scorer[name] = score
            np.multiply(w, score, out=weighted)
            device_total += weighted
        device_total /= self._total_weight
        return _PartEval(
            part,
            index,
            cand,
            memory,
            grants,
            device_total,
            per_scorer,
            ctx,
            c.node.take(cand),
            lambda: self._device_codes(part, index),
        )

    @staticmethod
    def _memory_need(part: RequestPart, mem_total: IntArray) -> IntArray:
        """MiB the part takes on devices of ``mem_total`` (before any partition profile)."""
        if part.memory_mib is not None:
            return np.full(mem_total.size, part.memory_mib, dtype=np.int64)
        if part.memory_percent is not None:
            return np.maximum(1, (mem_total * part.memory_percent / 100.0).astype(np.int64))
        return mem_total.copy()  # no memory given: the whole device's memory

    def _uuid_mask(self, part: RequestPart, rows: IntArray) -> BoolArray:
        c = self.cluster
        bad = np.zeros(rows.size, dtype=bool)
        if part.uuids or part.exclude_uuids:
            allowed = {c.uuid_index[u] for u in part.uuids if u in c.uuid_index}
            banned = {c.uuid_index[u] for u in part.exclude_uuids if u in c.uuid_index}
            if part.uuids:
                bad |= ~np.isin(rows, list(allowed))
            bad |= np.isin(rows, list(banned))
        return bad

    def _device_codes(self, part: RequestPart, index: int) -> tuple[IntArray, IntArray]:
        """Each live row's first failing filter (index into DEVICE_CODES; -1 passes), for explaining."""
        c = self.cluster
        rows = c.live_rows()
        at = c.live_index()  # a slice when the arrays have no holes: views, not copies
        n = rows.size
        memory = self._memory_need(part, c.mem_total[at])
        fails: list[BoolArray] = []
        size = c.size
        if part.vendors or part.exclude_vendors:  # the filter's cached static masks, read at the live rows
            vendors = (tuple(part.vendors), tuple(part.exclude_vendors))
            fails.append(~self._static_mask(("vendor", vendors), lambda: ~self._vendor_bad(part, c.vendor[:size]))[at])
        else:
            fails.append(np.zeros(n, dtype=bool))
        if part.models or part.exclude_models:
            models = (tuple(part.models), tuple(part.exclude_models))
            fails.append(~self._static_mask(("model", models), lambda: ~self._model_bad(part, c.model[:size]))[at])
        else:
            fails.append(np.zeros(n, dtype=bool))
        fails.append(self._uuid_mask(part, rows))
        fails.append(~c.healthy[at])
        if part.precision is not None:
            fails.append(c.has_traits[at] & (c.tflops[at, _PRECISION[part.precision]] <= 0))
        else:
            fails.append(np.zeros(n, dtype=bool))
        fails.append(np.zeros(n, dtype=bool) if part.numa_node is None else c.numa[at] != part.numa_node)
        fails.append(np.zeros(n, dtype=bool))  # partitions: only rules that plan decide (below)
        fails.append(c.exclusive[at])
        fails.append(np.full(n, part.exclusive) & (c.sharers[at] > 0))
        fails.append(c.sharers[at] + 1 > c.split[at])
        fails.append(c.mem_used[at] + memory > c.mem_capacity(at))
        fails.append(c.cores_used[at] + part.cores > c.core_cap[at])
        node_ok = c.node_ok[c.node[at]]
        bad = np.zeros(n, dtype=bool)
        code = np.full(n, -1)
        for i, mask in enumerate(fails[:6]):  # static facts and health
            new = mask & ~bad & node_ok
            code[new] = i
            bad |= mask
        asked = ~bad & (~c.plain[at] if part.partition is None else np.ones(n, dtype=bool))
        for i, mask in enumerate(fails[6:], start=6):  # usage: by arrays where the rule is plain
            new = mask & ~bad & ~asked & node_ok
            code[new] = i
            bad |= mask & ~asked
        if asked.any():
            ks = np.flatnonzero(asked & node_ok)
            memo = c.plan_rows(rows[ks], part, part.model_dump_json(), index)
            ks = ks[~memo.ok[rows[ks]]]
            if ks.size:
                position = {reason: i for i, reason in enumerate(DEVICE_CODES)}
                unknown = position[ReasonCode.CARD_PARTITION_UNAVAILABLE]
                code[ks] = [position.get(reason, unknown) for reason in memo.first[rows[ks]].tolist()]
        return rows, code

    def _vendor_bad(self, part: RequestPart, ids: IntArray) -> BoolArray:
        return self._name_mask(ids, part.vendors, part.exclude_vendors, self.cluster.vendor_id)

    def _model_bad(self, part: RequestPart, ids: IntArray) -> BoolArray:
        """Rows whose model answers to none of ``models`` or to one of ``exclude_models`` (names and aliases)."""
        c = self.cluster
        bad = np.zeros(ids.size, dtype=bool)
        if part.models:
            bad |= ~np.isin(ids, c.model_ids_matching(part.models))
        if part.exclude_models:
            bad |= np.isin(ids, c.model_ids_matching(part.exclude_models))
        return bad

    @staticmethod
    def _name_mask(ids: IntArray, include: list[str], exclude: list[str], lookup: Any) -> BoolArray:
        bad = np.zeros(ids.size, dtype=bool)
        if include:
            bad |= ~np.isin(ids, [lookup(x) for x in include])
        if exclude:
            bad |= np.isin(ids, [lookup(x) for x in exclude])
        return bad

    # ------------------------------------------------------------------ choose sets
    def _grow_set(self, ev: _PartEval, positions: list[int], count: int) -> list[int]:
        """Greedy set from each seed: add the device with the best mean pair score to those chosen.

        The device's own score breaks near ties.  Each seed gives one set; the
        best-scoring set wins.  O(k^2 * count) per node instead of C(k, count).
        """
        if count <= 1 or (self.weights.get("topology", 0) <= 0 and self.request_topology == "none"):
            return positions[:count]
        rows = [int(ev.rows[p]) for p in positions]
        pairs = self.cluster.pair_matrix(rows)
        own = ev.device_total[np.array(positions)] * 0.01
        best: list[int] = positions[:count]
        best_val = -np.inf
        seen: set[tuple[int, ...]] = set()
        # All seeds grow at once: row s of ``acc`` sums the pair scores of seed s's chosen
        # devices to every device.  Pair scores are integers, so these sums are exact and
        # acc / m equals the mean over the chosen columns bit for bit.
        size = len(positions)
        seeds = np.arange(size)
        sets = np.empty((size, count), dtype=np.int64)
        sets[:, 0] = seeds
        taken = np.zeros((size, size), dtype=bool)
        taken[seeds, seeds] = True
        acc = pairs.copy()
        for m in range(1, count):
            gain = acc / m + own
            gain[taken] = -np.inf
            pick = np.argmax(gain, axis=1)
            sets[:, m] = pick
            taken[seeds, pick] = True
            acc += pairs[pick]
        for seed in range(size):
            chosen = [int(x) for x in sets[seed]]
            key = tuple(sorted(chosen))
            if key in seen:
                continue
            seen.add(key)
            val = self._set_value(ev, [positions[k] for k in key])
            if val > best_val + 1e-9:
                best, best_val = [positions[k] for k in key], val
        return best

    def _set_value(self, ev: _PartEval, positions: list[int]) -> float:
        return self._score_set(ev, positions).score

    def _score_set(self, ev: _PartEval, positions: list[int]) -> _Choice:
        rows = [int(ev.rows[p]) for p in positions]
        idx = np.array(positions, dtype=np.int64)
        per: dict[str, float] = {}
        for name in self.weights:
            values = ev.per_scorer[name][idx]
            if name in self._mean_set:
                # Scorer.score_set inlined: float(np.mean(v)) is add.reduce(v) / n, bit for bit.
                per[name] = float(np.add.reduce(values)) / values.size if values.size else 0.0
            else:
                per[name] = self.scorers[name].score_set(ev.ctx, rows, values)
        total = sum(self.weights[k] * per[k] for k in per) / self._total_weight
        return _Choice(positions, total, per)

    def _node_choice(self, ev: _PartEval, node: int, exclude: set[int], pool: IntArray | None = None) -> _Choice | None:
        """The part's best device set on one node, avoiding ``exclude`` rows.

        ``pool``: ascending candidate positions that include all of the node's (a prefilter
        shared by the few nodes examined in depth, so each does not scan every candidate).
        """
        on = np.flatnonzero(ev.nodes == node) if pool is None else pool[ev.nodes[pool] == node]
        if exclude:
            on = on[~np.isin(ev.rows[on], list(exclude))]
        if on.size < ev.part.count:
            return None
        on = on[np.lexsort((ev.rows[on], -ev.device_total[on]))]
        positions = self._grow_set(ev, [int(p) for p in on], ev.part.count)
        choice = self._score_set(ev, positions)
        if self.request_topology == "required" and choice.per_scorer.get("topology", self._topo(ev, positions)) < (
            self.policy.topology_min_pair_score
        ):
            return None
        return choice

    def _topo(self, ev: _PartEval, positions: list[int]) -> float:
        from hami_devices.scheduling.scorers.topology import set_pair_score

        return set_pair_score(self.cluster, [int(ev.rows[p]) for p in positions])

    # ------------------------------------------------------------------ rank
    def _rank(
        self,
        request: ResourceRequest,
        limit: int,
        *,
        explain: bool = True,
        candidates: Sequence[BoolArray | None] | None = None,
    ) -> tuple[list[Placement], dict[str, list[ReasonCode]]]:
        c = self.cluster
        self.request_topology = request.topology
        masks = candidates if candidates is not None else [None] * len(request.parts)
        host_ok = c.node_ok & (c.node_cpu_free >= request.host_cpu_milli) & (c.node_mem_free >= request.host_memory_mib)
        evals = [self._filter(part, i, request, masks[i], host_ok=host_ok) for i, part in enumerate(request.parts)]
        results: list[tuple[float, str, list[int], list[tuple[_PartEval, _Choice]]]] = []
        if not evals:
            placements = self._rank_host(request, host_ok, max(limit, 0))
            if explain and (limit == 0 or not placements):
                return placements, self._reasons(evals, host_ok, request)
            return placements, {}
        if request.same_node:
            results = self._rank_same_node(evals, host_ok, max(limit, 1))
        else:
            split = self._rank_split(evals, host_ok)
            results = [split] if split is not None else []
        placements = [self._placement(request, node, chosen) for _, node, _, chosen in results[: max(limit, 0)]]
        reasons: dict[str, list[ReasonCode]] = {}
        if explain and (limit == 0 or not placements):
            reasons = self._reasons(evals, host_ok, request)
        return placements, reasons

    def _rank_same_node(
        self, evals: list[_PartEval], host_ok: BoolArray, limit: int
    ) -> list[tuple[float, str, list[int], list[tuple[_PartEval, _Choice]]]]:
        c = self.cluster
        single = len(evals) == 1 and evals[0].part.count == 1
        if single:
            ev = evals[0]
            rank = c.name_rank()
            if limit == 1 and ev.rows.size:
                # The devices whose score rounded to 1e-9 is the best, found without rounding every
                # candidate: rounding is monotone, so only scores within 1e-8 of the best can tie.
                masked = ev.device_total
                if not host_ok.all():
                    masked = np.where(host_ok.take(ev.nodes), masked, -np.inf)
                high = float(masked.max())
                if high == -np.inf:
                    return []
                if np.isfinite(high):
                    best = np.round(high, 9)
                    near = np.flatnonzero(masked >= best - 1e-8)
                    top = near[np.round(ev.device_total[near], 9) >= best]
                    order = top[np.lexsort((ev.rows[top], rank[ev.nodes[top]]))]
                    return [self._single(ev, int(order[0]))]
            pos = np.flatnonzero(host_ok[ev.nodes])
            if pos.size == 0:
                return []
            score = np.round(ev.device_total[pos], 9)
            if limit == 1:
                top = pos[score >= score.max()]
                order = top[np.lexsort((ev.rows[top], rank[c.node[ev.rows[top]]]))]
                picks = order[:1]
            else:
                order = pos[np.lexsort((ev.rows[pos], rank[c.node[ev.rows[pos]]], -score))]
                _, first = np.unique(c.node[ev.rows[order]], return_index=True)
                picks = order[np.sort(first)][:limit]
            return [self._single(ev, int(p)) for p in picks]
        # Multi-device or multi-part: rank nodes by the sum of each part's best device scores,
        # then examine the best SEARCH_NODES of them in depth.
        node_score = np.zeros(len(c.node_names))
        feasible = host_ok.copy()
        for ev in evals:
            nodes = ev.nodes
            counts = np.bincount(nodes, minlength=len(c.node_names))
            feasible &= counts >= ev.part.count  # disjointness between parts is checked in depth
            best = np.full(len(c.node_names), -np.inf)
            np.maximum.at(best, nodes, ev.device_total)
            node_score += ev.part.count * np.where(np.isfinite(best), best, 0.0)
        cand = np.flatnonzero(feasible)
        if cand.size == 0:
            return []
        cand = cand[_top_stable(node_score[cand], max(SEARCH_NODES, limit))]
        pools = [np.flatnonzero(np.isin(ev.nodes, cand)) for ev in evals]
        results = []
        for node in cand:
            used: set[int] = set()
            chosen: list[tuple[_PartEval, _Choice]] = []
            for ev, pool in zip(evals, pools, strict=True):
                choice = self._node_choice(ev, int(node), used, pool)
                if choice is None:
                    break
                used.update(int(ev.rows[p]) for p in choice.rows)
                chosen.append((ev, choice))
            else:
                total = self._combined(chosen)
                results.append((total, c.node_name(int(node)), sorted(used), chosen))
        results.sort(key=lambda r: (-round(r[0], 9), r[1], r[2]))
        return results[:limit]

    def _rank_host(self, request: ResourceRequest, host_ok: BoolArray, limit: int) -> list[Placement]:
        """A request for host CPU and memory only: the scorers that judge nodes rank the feasible ones."""
        c = self.cluster
        nodes = np.flatnonzero(host_ok)
        if nodes.size == 0 or limit == 0:
            return []
        ctx = HostContext(c, request, nodes, self.mix)
        per_scorer: dict[str, FloatArray] = {}
        for name in self.weights:
            values = self.scorers[name].score_host(ctx)
            if values is not None:
                per_scorer[name] = np.clip(np.asarray(values, dtype=np.float64), 0.0, 100.0)
        weight = sum(self.weights[k] for k in per_scorer)
        total = np.zeros(nodes.size)
        for name, values in per_scorer.items():
            total += self.weights[name] * values
        if weight > 0:
            total /= weight
        order = np.lexsort((c.name_rank()[nodes], -np.round(total, 9)))[:limit]
        return [
            Placement(
                request=request,
                node=c.node_name(int(nodes[k])),
                grants=[],
                score=float(total[k]),
                breakdown={name: float(values[k]) for name, values in per_scorer.items()},
                weights=dict(self.weights),
                policy=self.policy.name,
            )
            for k in order.tolist()
        ]

    def _single(self, ev: _PartEval, p: int) -> tuple[float, str, list[int], list[tuple[_PartEval, _Choice]]]:
        return (
            float(ev.device_total[p]),
            self.cluster.node_name(int(ev.nodes[p])),
            [p],
            [(ev, self._score_set(ev, [p]))],
        )

    def _rank_split(
        self, evals: list[_PartEval], host_ok: BoolArray
    ) -> tuple[float, str, list[int], list[tuple[_PartEval, _Choice]]] | None:
        c = self.cluster
        used: set[int] = set()
        chosen: list[tuple[_PartEval, _Choice]] = []
        host_node = ""
        for i, ev in enumerate(evals):
            allowed = host_ok  # each node of a split placement runs a process: it needs the host resources
            nodes = np.unique(c.node[ev.rows])
            nodes = nodes[allowed[nodes]]
            best: tuple[float, str, _Choice] | None = None
            best_dev = np.full(len(c.node_names), -np.inf)
            np.maximum.at(best_dev, c.node[ev.rows], ev.device_total)
            nodes = nodes[_top_stable(best_dev[nodes], SEARCH_NODES)]
            pool = np.flatnonzero(np.isin(ev.nodes, nodes))
            for node in nodes:
                choice = self._node_choice(ev, int(node), used, pool)
                if choice is None:
                    continue
                key = (choice.score, c.node_name(int(node)))
                if best is None or (-round(key[0], 9), key[1]) < (-round(best[0], 9), best[1]):
                    best = (choice.score, key[1], choice)
            if best is None:
                return None
            if i == 0:
                host_node = best[1]
            used.update(int(ev.rows[p]) for p in best[2].rows)
            chosen.append((ev, best[2]))
        return self._combined(chosen), host_node, sorted(used), chosen

    def _combined(self, chosen: list[tuple[_PartEval, _Choice]]) -> float:
        weight = sum(ev.part.count for ev, _ in chosen)
        return sum(ev.part.count * ch.score for ev, ch in chosen) / max(weight, 1)

    def _placement(self, request: ResourceRequest, node: str, chosen: list[tuple[_PartEval, _Choice]]) -> Placement:
        grants: list[Grant] = []
        breakdown = dict.fromkeys(self.weights, 0.0)
        weight = sum(ev.part.count for ev, _ in chosen)
        for ev, choice in chosen:
            for name, value in choice.per_scorer.items():
                breakdown[name] += ev.part.count * value / max(weight, 1)
            grants.extend(self._grant_at(ev, p) for p in choice.rows)
        return Placement(
            request=request,
            node=node,
            grants=grants,
            score=self._combined(chosen),
            breakdown=breakdown,
            weights=dict(self.weights),
            policy=self.policy.name,
        )

    # ------------------------------------------------------------------ explain
    def _reasons(
        self, evals: list[_PartEval], host_ok: BoolArray, request: ResourceRequest
    ) -> dict[str, list[ReasonCode]]:
        c = self.cluster
        out: dict[str, list[ReasonCode]] = unknown_names(c, request)
        if out:  # a name nothing in the cluster answers to: every device would just say "mismatch"
            return out
        for name, state in c.nodes.items():
            row = c.node_row(name)
            codes: list[ReasonCode] = []
            if not state.schedulable:
                codes.append(ReasonCode.NODE_UNSCHEDULABLE)
            if c.node_cpu_free[row] < request.host_cpu_milli:
                codes.append(ReasonCode.NODE_INSUFFICIENT_CPU)
            if c.node_mem_free[row] < request.host_memory_mib:
                codes.append(ReasonCode.NODE_INSUFFICIENT_MEMORY)
            for ev in evals:
                if not host_ok[row]:  # its devices were no candidates: the host codes above say why
                    continue
                have = int(np.count_nonzero(c.node[ev.rows] == row))
                if have < ev.part.count:
                    codes.append(ReasonCode.NODE_INSUFFICIENT_DEVICES)
                    for dev in state.devices:
                        code = ev.rejected.get(dev)
                        if code is not None and code not in codes:
                            codes.append(code)
                elif request.topology == "required" and ev.part.count > 1 and self._node_choice(ev, row, set()) is None:
                    codes.append(ReasonCode.NODE_TOPOLOGY_UNSATISFIED)
            if codes:
                out[name] = list(dict.fromkeys(codes))
        for ev in evals:
            for dev, code in ev.rejected.items():
                info = c.infos[dev]
                if info is not None:
                    out.setdefault(info.uuid, [])
                    if code not in out[info.uuid]:
                        out[info.uuid].append(code)
        return out


def unknown_names(cluster: ClusterState, request: ResourceRequest) -> dict[str, list[ReasonCode]]:
    """Parts whose vendor or model list names nothing any device of the cluster answers to."""
    out: dict[str, list[ReasonCode]] = {}
    for i, part in enumerate(request.parts):
        if part.vendors and not any(cluster.knows_vendor(v) for v in part.vendors):
            out[f"parts.{i}.vendors"] = [ReasonCode.UNKNOWN_VENDOR]
        if part.models and not any(cluster.knows_model(m) for m in part.models):
            out[f"parts.{i}.models"] = [ReasonCode.UNKNOWN_MODEL]
    return out


def _top_stable(values: FloatArray, k: int) -> IntArray:
    """``np.argsort(-values, kind="stable")[:k]`` without sorting everything.

    Every value tied with the k-th largest is kept before the stable sort of the
    few survivors, so the order, ties by position included, is the full sort's.
    """
    if values.size <= k:
        return np.argsort(-values, kind="stable")
    neg = -values
    kth = np.partition(neg, k - 1)[k - 1]
    if np.isnan(kth):  # fewer than k numbers: keep the plain sort's semantics
        return np.argsort(neg, kind="stable")[:k]
    keep = np.flatnonzero(neg <= kth)
    return keep[np.argsort(neg[keep], kind="stable")][:k]


@lru_cache(maxsize=64)
def _scorer_classes(wanted: tuple[str, ...]) -> dict[str, Any]:
    """Entry-point lookups cost milliseconds; an allocator builds an engine per call, so remember them."""
    classes, failures = load_scorers(wanted)
    if failures:
        first = next(iter(failures.values()))
        raise InvalidConfig("scorers", f"scorer plugin failed to load: {first}")
    return classes


def load_scorer_plugins(names: Sequence[str] | Mapping[str, float]) -> dict[str, Scorer]:
    """Instantiate the named scorers from the ``hami_devices.scorers`` entry points (stevedore)."""
    wanted = list(names)
    classes = _scorer_classes(tuple(sorted(wanted)))
    out: dict[str, Scorer] = {}
    for name in wanted:
        if name in classes:
            scorer = classes[name]()
            if not isinstance(scorer, Scorer):
                raise InvalidConfig("scorers", f"{name!r} is not a Scorer")
            out[name] = scorer
    return out


def match_model(name: str) -> str:
    return normalize_model_name(name)
