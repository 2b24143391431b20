"""Allocating ResourceClaims with the scheduling engine.

CEL selectors (the class's, then the request's) and constraints only *narrow*
candidates: each request becomes a ``RequestPart`` with its count and its capacity as
memory MiB and cores, limited to the devices that matched.  The engine is told those
devices as a row mask (``Engine.try_place(candidates=...)``, the same as a uuid list,
which for a thousand devices cost more than the decision); the booking and any
refusal carry the part with its ``uuids`` list.  What a (class, selectors) pair
selects, and the masks, are computed once per allocator: published devices do not
change within it.  Where a
device is placed, and what a share of it becomes (rounding, partitions), is the
engine's decision under the configured policy -- the one placement path; there is no
second capacity model here.  A claim is one multi-part request, all on one node, all or
nothing; ``firstAvailable`` alternatives, the kinds of device a request matched
(shares of a card, or a partition profile) and ``matchAttribute`` values are tried in
order until the engine places one.

The result names each device (``driver``/``pool``/``device``), a ``shareID`` for a share
of a shareable card and its ``consumedCapacity`` (the request by the device's published
policy, as Kubernetes computes it: ``consumption``); a partition device is allocated
whole and its counters are booked.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_devices import accounting
from hami_devices.assembly import build_engine
from hami_devices.config import HamiConfig
from hami_devices.errors import InsufficientResources, InvalidRequest, UnknownAllocation
from hami_devices.inputs import as_config
from hami_devices.kubernetes.dra import names
from hami_devices.kubernetes.dra.catalog import Catalog, from_slices, inventory
from hami_devices.kubernetes.dra.claims import Claim, Constraint, parse_claim
from hami_devices.kubernetes.dra.classes import class_specs, selectors_of
from hami_devices.kubernetes.dra.consumption import consumed_capacity
from hami_devices.kubernetes.dra.counters import CounterBook
from hami_devices.kubernetes.dra.narrowing import Narrowing, Option
from hami_devices.kubernetes.dra.nomatch import why_no_device
from hami_devices.kubernetes.dra.results import grants_of
from hami_devices.models import ResourceRequest
from hami_devices.registry import VendorRegistry, load_vendors
from hami_devices.scheduling.cluster import BoolArray
from hami_devices.scheduling.engine import Placement

MAX_ATTEMPTS = 128
"""Combinations of alternatives tried per claim before it is refused."""
REPAIRS = 8
"""Times a distinctAttribute conflict narrows a request and asks the engine again."""


@dataclass
class Booked:
    result: dict[str, Any]
    partitions: list[int] = field(default_factory=list)
    shares: list[int] = field(default_factory=list)  # shared cards that consume their counter set


class DraAllocator:
    """A scheduler's DRA allocator over published ResourceSlices, placing with the engine.

    Its parts: ``narrowing`` (what each request can be served by) and ``counters`` (partition devices
    and counter sets in use); it searches their combinations with the engine and books the claims.
    """

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]],
        config: HamiConfig | Mapping[str, Any] | str | Path | None = None,
        *,
        policy: str | None = None,
        registry: VendorRegistry | None = None,
    ) -> None:
        objects = list(objects)
        config = as_config(config)  # a path, a mapping or the object, as every entry point takes it
        self.config = config
        self.registry = registry or load_vendors(config=config)
        self.catalog: Catalog = from_slices(objects)
        self.catalog.env.prepare()
        inv = inventory(self.catalog, self._traits)
        self.engine = build_engine(inv, config, policy=policy, registry=self.registry)
        self.memory_factor = accounting.memory_factor(config)
        vendors = {str(self.catalog.devices[i].own("vendor")) for i in self.catalog.physical()}
        self.classes: dict[str, list[str]] = {k: [v] for k, v in class_specs(vendors).items()}
        for obj in objects:  # DeviceClasses given with the slices override ours of the same name
            if obj.get("kind") == "DeviceClass":
                self.classes[obj["metadata"]["name"]] = selectors_of(dict(obj))
        self._uuid_row = self.catalog.by_uuid()
        self._ours = [i for i, d in enumerate(self.catalog.devices) if d.ours]
        self.narrowing = Narrowing(self.catalog, self.engine, self.classes, self.memory_factor, self._ours)
        self.counters = CounterBook(self.catalog, self.engine, self._ours, self.narrowing.uuid_of)
        self._claims: dict[str, Booked] = {}
        self._lock = threading.Lock()

    def _traits(self, vendor: str, model: str) -> Any:
        adapter = self.registry.adapters.get(vendor)
        return adapter.traits_for(model) if adapter is not None else None

    # ------------------------------------------------------------------ public
    def allocate(self, claim: Claim | Mapping[str, Any]) -> dict[str, Any]:
        """The claim's ``AllocationResult`` (API JSON), booked; the same result again for an allocated claim."""
        if not isinstance(claim, Claim):
            claim = parse_claim(dict(claim))
        with self._lock:
            held = self._claims.get(claim.uid)
            if held is not None:
                return held.result
            return self._allocate(claim)

    def allocated(self, claim: Claim | Mapping[str, Any]) -> dict[str, Any]:
        """The claim object with ``status.allocation`` set (allocating it if needed)."""
        if not isinstance(claim, Claim):
            claim = parse_claim(dict(claim))
        result = self.allocate(claim)
        out = dict(claim.raw)
        out["status"] = {**(out.get("status") or {}), "allocation": result}
        return out

    def release(self, claim_uid: str) -> None:
        """Forget a deallocated claim: its shares and partition devices are free again."""
        with self._lock:
            held = self._claims.pop(claim_uid, None)
            if held is None:
                raise UnknownAllocation(claim_uid)
            self.engine.cluster.forget(claim_uid)
            for row in held.partitions:
                self.counters.free(row)
            for row in held.shares:
                self.counters.release_share(row)

    def book(self, claim: Claim | Mapping[str, Any]) -> None:
        """Mirror a claim someone already allocated (``status.allocation``), e.g. after a restart."""
        if not isinstance(claim, Claim):
            claim = parse_claim(dict(claim))
        allocation = claim.allocation
        if not allocation:
            raise InvalidRequest("status.allocation", f"claim {claim.label} is not allocated")
        with self._lock:
            if claim.uid in self._claims:
                return
            grants, rows, node = grants_of(self.catalog, allocation, self._uuid_row)
            self.engine.cluster.assume(node, grants, booking_id=claim.uid)
            for row in rows:
                self.counters.take(row)
            shares = [self._uuid_row[g.uuid] for g in grants if not g.partition]
            for row in shares:
                self.counters.hold_share(row)
            self._claims[claim.uid] = Booked(allocation, rows, shares)

    # ------------------------------------------------------------------ search
    def _allocate(self, claim: Claim) -> dict[str, Any]:
        per_request = [self.narrowing.options(claim, r.alternatives) for r in claim.requests]
        for wanted, options in zip(claim.requests, per_request, strict=True):
            if not options:
                sub = wanted.alternatives[0]
                why = why_no_device(sub, self.classes, self.catalog.env, self._ours, claim.label)
                raise InsufficientResources(
                    f"claim {claim.label}: request {wanted.name}: {why}",
                    {f"requests.{wanted.name}": []},
                    permanent=True,
                )
        first: tuple[ResourceRequest, Sequence[Option]] | None = None
        attempts = 0
        for variant in self.narrowing.matched_variants(claim, per_request):
            for combo in itertools.product(*variant):
                attempts += 1
                if attempts > MAX_ATTEMPTS:
                    break
                request = ResourceRequest(name=claim.label, parts=[o.part for o in combo], policy=claim.policy)
                if first is None:
                    first = (request, combo)
                    self.engine.observe(request)  # a claim's arrival teaches the mix once, as its first alternative
                chosen = self._place(claim, request, combo)
                if chosen is not None:
                    placement, partitions, final = chosen
                    return self._commit(claim, placement, final, partitions)
        if first is None:  # no value of a matchAttribute is shared by devices of every request it binds
            raise InsufficientResources(
                f"claim {claim.label}: no devices of its requests share a value of "
                + ", ".join(str(c.match) for c in claim.constraints if c.match),
                {"constraints": []},
                permanent=True,
            )
        refusal = self.engine.refusal(_with_uuids(*first))
        raise InsufficientResources(
            f"claim {claim.label} does not fit: {refusal.summary_message}",
            refusal.reasons,
            permanent=refusal.permanent,
            nearest=refusal.nearest,
            unmatched=refusal.unmatched,
        )

    def _place(
        self, claim: Claim, request: ResourceRequest, combo: Sequence[Option]
    ) -> tuple[Placement, list[int], Sequence[Option]] | None:
        """The engine's placement; a distinctAttribute conflict narrows the later request and asks again."""
        distinct = [c for c in claim.constraints if c.distinct]
        for _ in range(REPAIRS):
            masks = self._masks(combo)
            placement = self.engine.try_place(request, candidates=masks)
            if placement is None:
                return None
            conflict = next((x for c in distinct if (x := self._conflict(c, placement, combo)) is not None), None)
            if conflict is None:
                partitions = self._partition_devices(placement, combo)
                return None if partitions is None else (placement, partitions, combo)
            index, attribute, values = conflict
            option = combo[index]
            rows = {u: rs for u, rs in option.rows.items() if self.narrowing.attribute(rs[0], attribute) not in values}
            if len(rows) < option.part.count:
                return None
            narrowed = self.narrowing.option(option.sub, option.part, rows)
            combo = [narrowed if k == index else o for k, o in enumerate(combo)]
            request = request.model_copy(update={"parts": [o.part for o in combo]})
        return None

    def _masks(self, combo: Sequence[Option]) -> list[BoolArray]:
        """Each option's cards less those the counters rule out: for a share, cards partitioned now; for a
        partition, cards where no device of its profile fits (shared, or their set used up)."""
        partitioned = self.counters.partitioned_cards()
        out = []
        for o in combo:
            blocked = partitioned if o.partition is None else self.counters.partition_cards_full(o.rows)
            out.append(o.mask & ~blocked if blocked is not None and blocked.any() else o.mask)
        return out

    def _conflict(
        self, constraint: Constraint, placement: Placement, combo: Sequence[Option]
    ) -> tuple[int, str, set[str]] | None:
        """(part, attribute, values its devices must avoid) for the first device repeating a value, or None."""
        attribute = constraint.distinct
        assert attribute is not None
        seen: dict[str, int] = {}
        for grant in placement.grants:
            option = combo[grant.part]
            if not constraint.applies(option.sub.request):
                continue
            value = self.narrowing.attribute(option.rows[grant.uuid][0], attribute)
            if value in seen and seen[value] != grant.part:
                others = {v for v, part in seen.items() if part != grant.part}
                return grant.part, attribute, others
            if value in seen:  # two devices of one request repeat a value: no narrowing of that request helps
                return grant.part, attribute, {value}
            seen[value] = grant.part
        return None

    def _partition_devices(self, placement: Placement, combo: Sequence[Option]) -> list[int] | None:
        """A free partition device (counters fitting) for each partition grant, in grant order; None if any lacks."""
        out: list[int] = []
        pending: list[int] = []
        for grant in placement.grants:
            option = combo[grant.part]
            if option.partition is None:
                continue
            rows = option.rows.get(grant.uuid, [])
            row = next((r for r in rows if self.counters.free_to_take(r, pending)), None)
            if row is None:
                return None
            pending.append(row)
            out.append(row)
        return out

    # ------------------------------------------------------------------ commit
    def _commit(
        self, claim: Claim, placement: Placement, combo: Sequence[Option], partitions: list[int]
    ) -> dict[str, Any]:
        results = []
        left = iter(partitions)
        for grant in placement.grants:
            option = combo[grant.part]
            row = self._uuid_row[grant.uuid] if option.partition is None else next(left)
            device = self.catalog.devices[row]
            entry: dict[str, Any] = {
                "request": option.sub.name,
                "driver": device.driver,
                "pool": device.pool,
                "device": device.name,
            }
            if device.shareable:
                entry["shareID"] = names.share_id(claim.uid, option.sub.name, device.name)
                entry["consumedCapacity"] = consumed_capacity(device, option.sub)
            results.append(entry)
        node = placement.grants[0].node
        result = {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
        booked = _with_uuids(placement.request, combo)  # the request as the uuid lists state it
        self.engine.cluster.assume(node, placement.grants, request=booked, booking_id=claim.uid)
        for row in partitions:
            self.counters.take(row)
        shares = [self._uuid_row[g.uuid] for g, o in ((g, combo[g.part]) for g in placement.grants)
                  if o.partition is None]
        for row in shares:
            self.counters.hold_share(row)
        self._claims[claim.uid] = Booked(result, partitions, shares)
        return result


def _with_uuids(request: ResourceRequest, combo: Sequence[Option]) -> ResourceRequest:
    """The request with each part's uuid list: what the engine's masks stood for."""
    return request.model_copy(update={"parts": [o.full_part() for o in combo]})
