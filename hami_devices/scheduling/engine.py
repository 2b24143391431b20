"""The scoring engine: filter, score, select, on arrays over the whole cluster.

``Engine(cluster, policy).rank(request)`` is a pure function of the cluster
state, the request and what the engine has learned: it returns placements,
best first, each with the per-scorer breakdown that ranked it.  ``place``
returns the best or raises ``InsufficientResources`` with the reason codes of
every rejected node and device; ``try_place`` returns the best or None.  None
of the three changes anything, so a what-if (a preemption probe, a
defragmentation move) asks them freely.

Two steps change the engine, and a scheduler takes them itself:

* ``observe(request)`` teaches the learning scorers (the fragmentation
  policy's workload mix) that the request was asked for.  Whoever *decides*
  for a request calls it once, before placing it, placed or not:
  ``hd.allocate``, ``engine.allocate``, ``engine.schedule`` and the extender's
  bind do; a loop of its own over ``try_place`` must too.  What-ifs must not.
* ``assume(placement)`` holds a placement in the cluster (``schedule`` is
  ``observe``, ``place`` and ``assume`` in one); a ledger commit is ``allocate``
  or ``commit``.

The stages live in their own modules: ``candidates`` (filter: the rule table
over the cluster's arrays), ``scoring`` (the policy's scorers, set scores),
``choosing`` (select, with deterministic ties), ``explaining`` (refusals) and
``verdicts`` (per-node answers for schedulers that choose the node).
Multi-part requests are placed together or not at all: with ``same_node`` all
parts go to one node with disjoint devices; otherwise each part picks its best
node in turn (away from the nodes of parts it has anti-affinity with), and host
CPU/memory are charged to the first part's node.

An engine has a device policy (``policy``) and a node policy (``node_policy``,
default the same); a request's own ``policy`` overrides either.  When the two
differ the node policy picks the node and the device policy the devices on it
(``levels``).  Parts that omit their count, cores or memory take the engine's
``defaults`` (``scheduler.default-*``) before anything else looks at them.

Every method that takes a request takes a ``ResourceRequest`` or a mapping of its fields.
An engine built with a ledger (``hd.build_engine(..., ledger=...)``) also commits: ``allocate``
(place and commit in one ledger transaction), ``commit`` (a placement decided earlier),
``release`` and ``refresh`` keep its cluster in step with the ledger (``commits``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hami_devices.errors import InsufficientResources, InvalidConfig, InvalidRequest, ReasonCode
from hami_devices.inputs import as_request
from hami_devices.models import Grant, RequestDefaults, RequestPart, ResourceRequest
from hami_devices.rules.columns import BoolArray, IntArray
from hami_devices.scheduling import candidates as filtering
from hami_devices.scheduling import explaining, levels
from hami_devices.scheduling.choosing import Chooser, Ranked, apart_of, grants_of
from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.commits import Commits
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.mix import OnlineMix
from hami_devices.scheduling.placement import Placement as Placement  # its home before: importers keep it
from hami_devices.scheduling.policies import Policy, resolve_policy
from hami_devices.scheduling.scorers.base import Scorer
from hami_devices.scheduling.scorers.fragmentation import FragmentationScorer
from hami_devices.scheduling.scoring import ScoredPart, Scoring, combined, load_scorer_plugins
from hami_devices.scheduling.verdicts import NodeVerdicts, judge_nodes

Explained = explaining.ArrayExplanation | dict[str, list[ReasonCode]]
"""Why a request did not fit: flags kept as arrays, or the names of the parts nothing answers to."""


@dataclass
class Ranking:
    """What ``Engine._rank`` found: placements, best first; or, when explaining, why there were none, and the
    candidates each part had on any node (None: to be computed)."""

    placements: list[Placement]
    reasons: Explained | None = None
    have: list[IntArray] | None = None


class Engine(Commits):
    """Places requests on one ``ClusterState`` under a device and a node policy (``hami_devices.build_engine``
    builds one from an inventory and a configuration file)."""

    def __init__(
        self,
        cluster: ClusterState,
        policy: Policy | str = "binpack",
        *,
        node_policy: Policy | str | None = None,
        scorers: Mapping[str, Scorer] | None = None,
        mix: WorkloadMix | None = None,
        user_policies: Mapping[str, Policy] | None = None,
        defaults: RequestDefaults | None = None,
    ) -> None:
        self.cluster = cluster
        self._user_policies = dict(user_policies or {})
        self.scoring = Scoring(resolve_policy(policy, self._user_policies), scorers, mix)
        self._scorings: dict[str, Scoring] = {self.scoring.policy.model_dump_json(): self.scoring}
        self.node_scoring = self.scoring if node_policy is None else self.scoring_for(node_policy)
        self.defaults = None if defaults is None or defaults.identity else defaults
        self.committer = None  # set by build_engine(..., ledger=...): see ``Commits``

    def scoring_for(self, policy: Policy | str) -> Scoring:
        """The scoring of ``policy`` (a name or a Policy), kept; scorers the engine has are shared (what a
        learning scorer learns serves every policy that weighs it)."""
        resolved = resolve_policy(policy, self._user_policies)
        key = resolved.model_dump_json()
        scoring = self._scorings.get(key)
        if scoring is None:
            have = self.scoring.scorers
            missing = [k for k, w in resolved.weights.items() if w > 0 and k not in have]
            scorers = {**have, **load_scorer_plugins(missing)} if missing else have
            scoring = self._scorings[key] = Scoring(resolved, scorers, self.scoring.mix)
        return scoring

    @property
    def node_policy(self) -> Policy:
        return self.node_scoring.policy

    def with_defaults(self, request: ResourceRequest | Mapping[str, Any]) -> ResourceRequest:
        """``request`` with the engine's defaults in every part that omits its count, cores or memory."""
        request = as_request(request)
        return request if self.defaults is None else self.defaults.apply(request)

    def levels(self, request: ResourceRequest) -> tuple[Scoring, Scoring]:
        """The (device, node) scorings ``request`` is placed by: its own policies, else the engine's."""
        asked = request.policy
        if asked is None:
            return self.scoring, self.node_scoring
        return self._level(asked.device, self.scoring, "device"), self._level(asked.node, self.node_scoring, "node")

    def _level(self, name: str | None, engines: Scoring, level: str) -> Scoring:
        if name is None:
            return engines
        try:
            return self.scoring_for(name)
        except InvalidConfig as exc:
            raise InvalidRequest(f"policy.{level}", exc.message) from None

    @property
    def policy(self) -> Policy:
        return self.scoring.policy

    @property
    def weights(self) -> dict[str, float]:
        return self.scoring.weights

    @property
    def scorers(self) -> dict[str, Scorer]:
        return self.scoring.scorers

    @property
    def mix(self) -> WorkloadMix | None:
        return self.scoring.mix

    def use_learned_mix(self, learner: OnlineMix) -> None:
        """Continue from ``learner`` (a mix saved by a scheduler, or kept in a ledger)."""
        scorer = self.scorers.get("fragmentation")
        if isinstance(scorer, FragmentationScorer):
            scorer.online = learner

    def learned_mix(self) -> OnlineMix | None:
        """The workload mix the fragmentation scorer has learned (save it with ``.save(path)``), if it learns."""
        scorer = self.scorers.get("fragmentation")
        return scorer.online if isinstance(scorer, FragmentationScorer) else None

    # ------------------------------------------------------------------ public
    def rank(self, request: ResourceRequest | Mapping[str, Any], limit: int = 5) -> list[Placement]:
        """Up to ``limit`` placements, best first; changes nothing (nor what the engine has learned)."""
        return self._rank(self.with_defaults(request), limit).placements

    def place(self, request: ResourceRequest | Mapping[str, Any]) -> Placement:
        """The best placement, or ``InsufficientResources`` with the reasons, the nearest misses and
        whether the request could fit this cluster at all (``permanent``); changes nothing (a scheduler
        that decides calls ``observe`` first)."""
        request = self.with_defaults(request)
        ranked = self._rank(request, 1)
        if not ranked.placements:
            assert ranked.reasons is not None
            raise explaining.refusal(self.cluster, request, ranked.reasons, ranked.have or self._have(request))
        return ranked.placements[0]

    def try_place(
        self, request: ResourceRequest | Mapping[str, Any], *, candidates: Sequence[BoolArray | None] | None = None
    ) -> Placement | None:
        """The best placement, or None; builds no explanation (for replays and tight loops); changes
        nothing (a loop that decides calls ``observe`` first).

        ``candidates``: per part, None or a boolean mask over the cluster's device rows (at least
        ``cluster.size`` long); the part may use only rows where it is True, exactly as if its
        ``uuids`` listed just those devices.  For callers that narrow parts to the same large sets
        of devices again and again (DRA selectors), where a uuid list costs more than the decision.
        """
        request = self.with_defaults(request)
        if candidates is not None and len(candidates) != len(request.parts):
            raise InvalidRequest("candidates", f"{len(candidates)} masks for {len(request.parts)} parts")
        placements = self._rank(request, 1, explain=False, masks=candidates).placements
        return placements[0] if placements else None

    def refusal(
        self, request: ResourceRequest | Mapping[str, Any], reasons: Explained | None = None
    ) -> InsufficientResources:
        """The error for a request that does not fit now: reasons per node and device, nearest misses, permanence."""
        request = self.with_defaults(request)
        found = self._rank(request, 0).reasons if reasons is None else reasons
        assert found is not None
        return explaining.refusal(self.cluster, request, found, self._have(request))

    def _have(self, request: ResourceRequest) -> list[IntArray]:
        """Per part, the devices that could take it now on any node (what nearest misses count)."""
        return [filtering.candidates(self.cluster, part, i).rows for i, part in enumerate(request.parts)]

    def observe(self, request: ResourceRequest | Mapping[str, Any]) -> None:
        """Teach the learning scorers (the fragmentation policy's workload mix) that ``request`` was asked for.

        The one step that changes what the engine has learned.  A scheduler calls it once per request it
        decides, before placing it, whether it fits or not: ``hd.allocate``, ``engine.allocate``,
        ``schedule`` and the extender's bind do; committing a placement decided earlier (``commit``,
        ``hd.allocate(devices, placement)``) teaches the ledger's mix, which engines on that ledger continue
        from.  A loop of its own over ``try_place`` and ``assume`` must call it.  A what-if (a preemption
        probe, a defragmentation move, ``rank`` for a report) must not.
        """
        request = self.with_defaults(request)
        for scorer in self.scorers.values():
            scorer.observe(request)

    def schedule(self, request: ResourceRequest | Mapping[str, Any]) -> Placement:
        """Decide for ``request`` in the cluster, not in a ledger (``allocate`` commits): ``observe``,
        ``place`` and ``assume``."""
        self.observe(request)
        placement = self.place(request)
        booking = self.assume(placement)
        placement.booking_id = booking.id
        return placement

    def assume(self, placement: Placement) -> Booking:
        """Hold ``placement`` in the cluster (assumed: no ledger holds it) until it is confirmed or forgotten."""
        r = placement.request
        return self.cluster.assume(
            placement.node,
            placement.grants,
            host_cpu_milli=r.host_cpu_milli,
            host_memory_mib=r.host_memory_mib,
            preemptible=r.preemptible,
            request=r,
        )

    def book(self, placement: Placement) -> Booking:
        """Deprecated: ``assume`` (what it always did); kept for one release."""
        warnings.warn("Engine.book is deprecated: use Engine.assume", DeprecationWarning, stacklevel=2)
        return self.assume(placement)

    def feasible(self, part: RequestPart, index: int = 0) -> dict[str, Grant]:
        """Every device that could take ``part`` now, with the grant it would get (device rules only:
        no node, host or topology judgement)."""
        ev = self.evaluate(part, index, ResourceRequest(parts=[part]), scored=False)
        grants = (ev.grant_at(self.cluster, p) for p in range(ev.rows.size))
        return {g.uuid: g for g in grants}

    def judge_nodes(
        self, request: ResourceRequest | Mapping[str, Any], nodes: Sequence[str] | None = None, *, scores: bool = True
    ) -> NodeVerdicts:
        """Per node of ``nodes`` (default: all): whether the request fits now and its score there, else its
        reason codes and whether it could ever fit there; over arrays, for schedulers that choose the node
        themselves (a kube-scheduler extender's filter and prioritize).  With a node policy apart from the
        device policy, a node's score is the node policy's (``levels.node_scores``)."""
        request = self.with_defaults(request)
        device, node = self.levels(request)

        def evaluate(*args: Any, **kwargs: Any) -> ScoredPart:
            return self.evaluate(*args, scoring=device, **kwargs)

        verdicts = judge_nodes(self.cluster, self.chooser(request), evaluate, request, nodes, scores=scores)
        if scores and node is not device and verdicts.feasible and request.parts:
            host = filtering.host_ok(self.cluster, request)
            evals = [self.evaluate(p, i, request, host=host, scoring=node) for i, p in enumerate(request.parts)]
            by_node = levels.node_scores(evals, len(self.cluster.node_names))
            rows = self.cluster.node_rows(verdicts.feasible)
            verdicts.scores = dict(zip(verdicts.feasible, by_node[rows].tolist(), strict=True))
        return verdicts

    def rejections(self, request: ResourceRequest | Mapping[str, Any]) -> dict[str, list[ReasonCode]]:
        """Reason codes per node (and per rejected device uuid) for ``--explain``."""
        found = self._rank(self.with_defaults(request), 0).reasons
        assert found is not None
        return found if isinstance(found, dict) else found.spelled_out()

    # ------------------------------------------------------------------ stages
    def chooser(self, request: ResourceRequest, scoring: Scoring | None = None) -> Chooser:
        """The set and node choice for ``request`` under its device policy (``scoring``, default: its own)."""
        scoring = scoring or self.levels(request)[0]
        return Chooser(self.cluster, scoring, request.topology, scoring.policy.topology_min_pair_score,
                       apart_of(request))

    def evaluate(
        self,
        part: RequestPart,
        index: int,
        request: ResourceRequest,
        *,
        host: BoolArray | None = None,
        mask: BoolArray | None = None,
        scored: bool = True,
        scoring: Scoring | None = None,
    ) -> ScoredPart:
        """One part filtered (``candidates``) and scored (by ``scoring``, default the engine's device policy);
        ``host``: per node row, the nodes the request may use, so scorers that judge the candidates as a whole
        see only what can be chosen."""
        c = self.cluster
        found = filtering.candidates(c, part, index, host=host, mask=mask)
        if host is not None and part.count > 1 and found.rows.size:  # placing: a node with too few is no candidate
            enough = np.bincount(c.node[found.rows], minlength=len(c.node_names))[c.node[found.rows]] >= part.count
            if not enough.all():
                found = filtering.Candidates(found.rows[enough], found.memory[enough],
                                             None if found.cores is None else found.cores[enough], found.grants)
        return (scoring or self.scoring).score_part(
            c, request, part, index, found, lambda: filtering.device_codes(c, part, index), scored=scored
        )

    def _rank(
        self,
        request: ResourceRequest,
        limit: int,
        *,
        explain: bool = True,
        masks: Sequence[BoolArray | None] | None = None,
    ) -> Ranking:
        host = filtering.host_ok(self.cluster, request)
        device, node = self.levels(request)
        chooser = self.chooser(request, device)
        masks = masks if masks is not None else [None] * len(request.parts)
        evals = [self.evaluate(part, i, request, host=host, mask=masks[i], scoring=device)
                 for i, part in enumerate(request.parts)]
        named = device.policy.name if node is device else f"{node.policy.name}/{device.policy.name}"
        if not evals:
            placements = self._host_placements(self.chooser(request, node), request, host, max(limit, 0))
        else:
            if node is not device:
                node_evals = [node.score_part(self.cluster, request, ev.part, ev.index, ev.candidates, ev.explain)
                              for ev in evals]
                if request.same_node:
                    ranked = levels.same_node(chooser, evals, node_evals, host, max(limit, 1))
                else:
                    split = levels.split(chooser, evals, node_evals, host)
                    ranked = [split] if split is not None else []
            elif request.same_node:
                ranked = chooser.same_node(evals, host, max(limit, 1))
            else:
                split = chooser.split(evals, host)
                ranked = [split] if split is not None else []
            placements = [self._placement(request, r, device, named) for r in ranked[: max(limit, 0)]]
        if explain and (limit == 0 or not placements):
            have = None
            if host.all() and all(m is None for m in masks) and all(ev.part.count == 1 for ev in evals):
                have = [ev.rows for ev in evals]  # nothing narrowed them: what a refusal's nearest misses count
            return Ranking(placements, explaining.explain(chooser, evals, host, request), have)
        return Ranking(placements)

    def _host_placements(
        self, chooser: Chooser, request: ResourceRequest, host: BoolArray, limit: int
    ) -> list[Placement]:
        """A request without devices goes where its node policy puts it."""
        scoring = chooser.scoring
        return [
            Placement(request, node, [], score, breakdown, dict(scoring.weights), scoring.policy.name)
            for node, score, breakdown in chooser.host_only(request, host, limit)
        ]

    def _placement(self, request: ResourceRequest, ranked: Ranked, scoring: Scoring, policy: str) -> Placement:
        _, node, _, chosen = ranked
        breakdown = dict.fromkeys(scoring.weights, 0.0)
        weight = sum(ev.part.count for ev, _ in chosen)
        for ev, choice in chosen:
            for name, value in choice.per_scorer.items():
                breakdown[name] += ev.part.count * value / max(weight, 1)
        return Placement(
            request=request,
            node=node,
            grants=grants_of(self.cluster, chosen),
            score=combined(chosen),
            breakdown=breakdown,
            weights=dict(scoring.weights),
            policy=policy,
        )

