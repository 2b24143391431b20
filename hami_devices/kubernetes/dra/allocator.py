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
of a shareable card and its ``consumedCapacity`` (the grant: what our accounting
holds); a partition device is allocated whole and its counters are booked.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from hami_devices import accounting
from hami_devices.assembly import build_engine
from hami_devices.config import HamiConfig, load_config
from hami_devices.errors import InsufficientResources, InvalidRequest, UnknownAllocation
from hami_devices.kubernetes import quantity as q
from hami_devices.kubernetes.dra import names
from hami_devices.kubernetes.dra.catalog import Catalog, from_slices, inventory
from hami_devices.kubernetes.dra.claims import ALL, Claim, Constraint, SubRequest, parse_claim
from hami_devices.kubernetes.dra.classes import class_specs, selectors_of
from hami_devices.kubernetes.dra.nomatch import why_no_device
from hami_devices.models import Grant, RequestPart, ResourceRequest
from hami_devices.registry import VendorRegistry, load_vendors
from hami_devices.scheduling.cluster import BoolArray
from hami_devices.scheduling.engine import Placement

MAX_ATTEMPTS = 128
"""Combinations of alternatives tried per claim before it is refused."""
REPAIRS = 8
"""Times a distinctAttribute conflict narrows a request and asks the engine again."""
FULL_CORES = 100


@dataclass
class Option:
    """One way to serve one request: a part for the engine and the catalog rows behind its devices.

    The part names no uuids; the engine is told the devices as ``mask`` (a boolean per engine
    row), which it applies exactly as the uuid list ``uuids``.  ``full_part`` is the part with
    that list, for what is booked and explained: a thousand-entry list costs more to build and
    match than the decision itself.
    """

    sub: SubRequest
    part: RequestPart
    rows: dict[str, list[int]]  # device uuid -> catalog rows (the card, or its partition devices of this profile)
    uuids: list[str]  # sorted(rows)
    mask: BoolArray

    @property
    def partition(self) -> str | None:
        return self.part.partition

    def full_part(self) -> RequestPart:
        return self.part.model_copy(update={"uuids": list(self.uuids)})


@dataclass
class _Devices:
    """A set of cards (or of partition devices grouped by card) in the three forms the search reads."""

    rows: dict[str, list[int]]
    uuids: list[str]
    mask: BoolArray


@dataclass
class Booked:
    result: dict[str, Any]
    partitions: list[int] = field(default_factory=list)


class DraAllocator:
    """A scheduler's DRA allocator over published ResourceSlices, placing with the engine."""

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]],
        config: HamiConfig | str | Path | None = None,
        *,
        policy: str | None = None,
        registry: VendorRegistry | None = None,
    ) -> None:
        objects = list(objects)
        if not isinstance(config, HamiConfig):
            config = load_config(config) if config is not None else HamiConfig()
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
        self._partition_rows: dict[tuple[str, str], list[int]] = {}
        for i, d in enumerate(self.catalog.devices):
            if d.ours and d.kind == names.KIND_PARTITION:
                self._partition_rows.setdefault((str(d.own("uuid")), str(d.own("partition"))), []).append(i)
        self._ours = [i for i, d in enumerate(self.catalog.devices) if d.ours]
        self._taken: set[int] = set()
        self._counters_used: dict[tuple[str, str, str], dict[str, Decimal]] = {}
        self._claims: dict[str, Booked] = {}
        self._lock = threading.Lock()
        # Published devices do not change within an allocator, so what a (class, selectors) pair
        # selects -- and how those rows split into cards and partitions -- is computed once.
        self._selected: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        self._split: dict[tuple[Any, ...], tuple[list[int], list[int]]] = {}
        # Per catalog row, read once: its card's uuid (a partition device's is its card's) and its kind.
        devices = self.catalog.devices
        self._uuid_of = [str(d.own("uuid")) for d in devices]
        self._kind_of = [d.kind for d in devices]
        self._shares: dict[tuple[Any, ...], list[_Devices]] = {}
        self._profiles: dict[tuple[Any, ...], list[tuple[str, _Devices]]] = {}
        self._capacities: dict[tuple[tuple[str, str], ...], tuple[int | None, int, dict[str, Decimal]]] = {}
        self._attribute_text: dict[tuple[int, str], str] = {}

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
                self._free_counters(row)

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
                self._take_counters(row)
            self._claims[claim.uid] = Booked(allocation, rows)

    # ------------------------------------------------------------------ search
    def _allocate(self, claim: Claim) -> dict[str, Any]:
        per_request = [self._options(claim, r.alternatives) for r in claim.requests]
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
        for variant in self._matched_variants(claim, per_request):
            for combo in itertools.product(*variant):
                attempts += 1
                if attempts > MAX_ATTEMPTS:
                    break
                request = ResourceRequest(name=claim.label, parts=[o.part for o in combo], same_node=True)
                first = first or (request, combo)
                chosen = self._place(claim, request, combo)
                if chosen is not None:
                    placement, partitions, final = chosen
                    return self._commit(claim, placement, final, partitions)
        assert first is not None
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
            placement = self.engine.try_place(request, candidates=[o.mask for o in combo])
            if placement is None:
                return None
            conflict = next((x for c in distinct if (x := self._conflict(c, placement, combo)) is not None), None)
            if conflict is None:
                partitions = self._partition_devices(placement, combo)
                return None if partitions is None else (placement, partitions, combo)
            index, attribute, values = conflict
            option = combo[index]
            rows = {u: rs for u, rs in option.rows.items() if self._attribute(rs[0], attribute) not in values}
            if len(rows) < option.part.count:
                return None
            narrowed = self._option(option.sub, option.part, rows)
            combo = [narrowed if k == index else o for k, o in enumerate(combo)]
            request = request.model_copy(update={"parts": [o.part for o in combo]})
        return None

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
            value = self._attribute(option.rows[grant.uuid][0], attribute)
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
            row = next((r for r in rows if r not in self._taken and r not in pending and self._fits(r, pending)), None)
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
                entry["consumedCapacity"] = {"memory": q.mib(grant.memory_mib), "cores": q.count(grant.cores)}
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
            self._take_counters(row)
        self._claims[claim.uid] = Booked(result, partitions)
        return result

    # ------------------------------------------------------------------ counters
    def _fits(self, row: int, pending: Sequence[int]) -> bool:
        d = self.catalog.devices[row]
        if d.counter_set is None:
            return True
        key = (d.driver, d.pool, d.counter_set)
        total = self.catalog.counters.get(key, {})
        used = dict(self._counters_used.get(key, {}))
        for other in pending:
            o = self.catalog.devices[other]
            if o.counter_set == d.counter_set and o.pool == d.pool:
                for k, v in o.consumes.items():
                    used[k] = used.get(k, Decimal(0)) + v
        return all(used.get(k, Decimal(0)) + v <= total.get(k, Decimal(0)) for k, v in d.consumes.items())

    def _take_counters(self, row: int) -> None:
        d = self.catalog.devices[row]
        self._taken.add(row)
        if d.counter_set is not None:
            used = self._counters_used.setdefault((d.driver, d.pool, d.counter_set), {})
            for k, v in d.consumes.items():
                used[k] = used.get(k, Decimal(0)) + v

    def _free_counters(self, row: int) -> None:
        d = self.catalog.devices[row]
        self._taken.discard(row)
        if d.counter_set is not None:
            used = self._counters_used[(d.driver, d.pool, d.counter_set)]
            for k, v in d.consumes.items():
                used[k] -= v

    # ------------------------------------------------------------------ narrowing
    def _candidates(self, claim: Claim, sub: SubRequest) -> list[int]:
        key = (sub.device_class, sub.selectors)
        rows = self._selected.get(key)
        if rows is None:
            rows = self._selected[key] = self._select(claim, sub)
        return rows

    def _select(self, claim: Claim, sub: SubRequest) -> list[int]:
        selectors = self.classes.get(sub.device_class)
        if selectors is None:
            raise InvalidRequest(
                f"{sub.field}.deviceClassName", f"claim {claim.label}: no DeviceClass {sub.device_class!r}"
            )
        rows = list(self._ours)
        env = self.catalog.env
        for expression in selectors:
            rows = env.select(expression, rows, claim.label, f"{sub.name} (class {sub.device_class})")
        for expression in sub.selectors:
            rows = env.select(expression, rows, claim.label, sub.name)
        return rows

    def _options(self, claim: Claim, alternatives: Sequence[SubRequest]) -> list[Option]:
        out: list[Option] = []
        for sub in alternatives:
            rows = self._candidates(claim, sub)
            memory, cores, extra = self._capacity(claim, sub)
            split_key = (sub.device_class, sub.selectors, tuple(sorted(extra.items())))
            split = self._split.get(split_key)
            if split is None:
                kinds = self._kind_of
                split = self._split[split_key] = (
                    [r for r in rows if kinds[r] == names.KIND_DEVICE and self._has(r, extra)],
                    [r for r in rows if kinds[r] == names.KIND_PARTITION],
                )
            shares, partition_rows = split
            if shares:
                out.extend(self._share_options(sub, split_key, shares, memory, cores))
            profiles = self._profile_groups(split_key, partition_rows, memory, cores, extra)
            if profiles and sub.mode == ALL:
                raise InvalidRequest(f"{sub.field}.allocationMode",
                                     f"claim {claim.label}: allocationMode All over partition devices is not supported")
            for profile, group in profiles:
                part = RequestPart(name=sub.name, count=sub.count, partition=profile)
                out.append(Option(sub, part, group.rows, group.uuids, group.mask))
        return out

    def _profile_groups(
        self, split_key: tuple[Any, ...], rows: list[int], memory: int | None, cores: int, extra: Mapping[str, Decimal]
    ) -> list[tuple[str, _Devices]]:
        """The partition devices that hold the request, per profile (smallest first), grouped by card; remembered."""
        key = (split_key, memory, cores)
        found = self._profiles.get(key)
        if found is not None:
            return found
        by_profile: dict[str, list[int]] = {}
        for r in rows:
            if self._partition_fits(r, memory, cores, extra):
                by_profile.setdefault(str(self.catalog.devices[r].own("partition")), []).append(r)
        found = []
        for profile, prows in sorted(by_profile.items(), key=lambda kv: self._profile_size(kv[1][0])):
            grouped: dict[str, list[int]] = {}
            for r in prows:
                grouped.setdefault(self._uuid_of[r], []).append(r)
            found.append((profile, self._devices(grouped)))
        self._profiles[key] = found
        return found

    def _share_options(
        self, sub: SubRequest, split_key: tuple[Any, ...], rows: list[int], memory: int | None, cores: int
    ) -> list[Option]:
        def part(count: int) -> RequestPart:
            if memory is not None:
                return RequestPart(name=sub.name, count=count, memory_mib=memory, cores=cores)
            percent = min(100.0, 100.0 * self.memory_factor)  # the published default: the whole card
            return RequestPart(name=sub.name, count=count, memory_percent=percent, cores=cores)

        key = (split_key, sub.mode == ALL)
        groups = self._shares.get(key)
        if groups is None:
            by_uuid = {self._uuid_of[r]: [r] for r in rows}
            if sub.mode != ALL:
                groups = [self._devices(by_uuid)]
            else:
                nodes: dict[str, list[str]] = {}
                for r in rows:
                    nodes.setdefault(self.catalog.devices[r].node, []).append(self._uuid_of[r])
                ordered = sorted(nodes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
                groups = [self._devices({x: by_uuid[x] for x in u}) for _, u in ordered]
            self._shares[key] = groups
        if sub.mode != ALL:
            return [Option(sub, part(sub.count), g.rows, g.uuids, g.mask) for g in groups]
        return [Option(sub, part(len(g.uuids)), g.rows, g.uuids, g.mask) for g in groups]

    def _devices(self, rows: dict[str, list[int]]) -> _Devices:
        uuids = sorted(rows)
        index = self.engine.cluster.uuid_index
        mask = np.zeros(self.engine.cluster.size, dtype=bool)
        mask[[index[u] for u in uuids if u in index]] = True  # as the engine reads a uuid list
        return _Devices(rows, uuids, mask)

    def _option(self, sub: SubRequest, part: RequestPart, rows: dict[str, list[int]]) -> Option:
        devices = self._devices(rows)
        return Option(sub, part, devices.rows, devices.uuids, devices.mask)

    def _attribute(self, row: int, qualified: str) -> str:
        """``repr`` of a device's attribute (what constraints compare), remembered."""
        key = (row, qualified)
        text = self._attribute_text.get(key)
        if text is None:
            text = self._attribute_text[key] = repr(self.catalog.devices[row].attribute(qualified))
        return text

    def _capacity(self, claim: Claim, sub: SubRequest) -> tuple[int | None, int, dict[str, Decimal]]:
        parsed = self._capacities.get(sub.capacity)
        if parsed is None:
            parsed = self._capacities[sub.capacity] = self._parse_capacity(sub)
        cores = parsed[1]
        if cores > FULL_CORES:
            raise InsufficientResources(
                f"claim {claim.label}: request {sub.name} asks for {cores} cores; a device holds {FULL_CORES}",
                {f"requests.{sub.name}": []},
                permanent=True,
            )
        return parsed

    @staticmethod
    def _parse_capacity(sub: SubRequest) -> tuple[int | None, int, dict[str, Decimal]]:
        memory: int | None = None
        cores = FULL_CORES
        extra: dict[str, Decimal] = {}
        for key, value in sub.capacity:
            domain, _, name = key.rpartition("/")
            field_name = f"{sub.field}.capacity.requests.{key}"
            if domain in ("", names.DOMAIN) and name == "memory":
                memory = max(1, q.to_mib(value, field_name))
            elif domain in ("", names.DOMAIN) and name == "cores":
                cores = max(1, q.to_int(value, field_name))
            else:
                extra[key if domain else f"{names.DOMAIN}/{name}"] = q.parse(value, field_name)
        return memory, cores, extra

    def _has(self, row: int, extra: Mapping[str, Decimal]) -> bool:
        """A capacity the driver does not share acts as a filter: the device must have at least that much."""
        d = self.catalog.devices[row]
        for key, amount in extra.items():
            domain, _, name = key.rpartition("/")
            if d.capacity.get(domain, {}).get(name, Decimal(-1)) < amount:
                return False
        return True

    def _partition_fits(self, row: int, memory: int | None, cores: int, extra: Mapping[str, Decimal]) -> bool:
        caps = self.catalog.devices[row].capacity.get(names.DOMAIN, {})
        have_mem = caps.get("memory", Decimal(0))
        have_cores = caps.get("cores", Decimal(0))
        cores_ok = cores == FULL_CORES or have_cores >= cores  # no cores asked: the whole partition
        return (memory is None or have_mem >= memory * q.MIB) and cores_ok and self._has(row, extra)

    def _profile_size(self, row: int) -> tuple[Decimal, Decimal]:
        caps = self.catalog.devices[row].capacity.get(names.DOMAIN, {})
        return caps.get("memory", Decimal(0)), caps.get("cores", Decimal(0))

    def _matched_variants(self, claim: Claim, per_request: list[list[Option]]) -> Iterable[list[list[Option]]]:
        """The options per request, narrowed to each shared value of every matchAttribute constraint."""
        matches = [c for c in claim.constraints if c.match]
        if not matches:
            yield per_request
            return
        value_lists = []
        for constraint in matches:
            assert constraint.match is not None
            counted: dict[str, int] = {}
            for request, options in zip(claim.requests, per_request, strict=True):
                if constraint.applies(request.name):
                    for o in options:
                        for rows in o.rows.values():
                            text = self._attribute(rows[0], constraint.match)
                            if text != "None":  # a device without the attribute matches nothing
                                counted[text] = counted.get(text, 0) + 1
            value_lists.append(sorted(counted, key=lambda v: (-counted[v], v)))
        for values in itertools.product(*value_lists):
            narrowed = []
            for request, options in zip(claim.requests, per_request, strict=True):
                kept = []
                for o in options:
                    kept_rows = {
                        u: rs
                        for u, rs in o.rows.items()
                        if all(
                            not c.applies(request.name) or self._attribute(rs[0], c.match or "") == v
                            for c, v in zip(matches, values, strict=True)
                        )
                    }
                    if kept_rows:
                        count = len(kept_rows) if o.sub.mode == ALL else o.part.count
                        kept.append(self._option(o.sub, o.part.model_copy(update={"count": count}), kept_rows))
                narrowed.append(kept)
            if all(narrowed):
                yield narrowed


def _with_uuids(request: ResourceRequest, combo: Sequence[Option]) -> ResourceRequest:
    """The request with each part's uuid list: what the engine's masks stood for."""
    return request.model_copy(update={"parts": [o.full_part() for o in combo]})


def grants_of(
    catalog: Catalog, allocation: Mapping[str, Any], uuid_row: Mapping[str, int]
) -> tuple[list[Grant], list[int], str]:
    """The grants an allocation result stands for (request order = part order), its partition rows, its node."""
    from hami_devices.kubernetes.dra.catalog import device_info

    results = [r for r in (allocation.get("devices") or {}).get("results") or [] if r.get("driver") == names.DRIVER]
    if not results:
        raise InvalidRequest("status.allocation.devices.results", f"no device of driver {names.DRIVER}")
    parts: dict[str, int] = {}
    grants: list[Grant] = []
    rows: list[int] = []
    for i, r in enumerate(results):
        row = catalog.index.get((r["driver"], r["pool"], r["device"]))
        if row is None:
            raise InvalidRequest(f"status.allocation.devices.results[{i}].device",
                                 f"{r['pool']}/{r['device']} is not published")
        device = catalog.devices[row]
        part = parts.setdefault(r["request"].split("/", 1)[0], len(parts))
        info = device_info(catalog.devices[uuid_row[str(device.own("uuid"))]], None)
        if device.kind == names.KIND_PARTITION:
            caps = device.capacity[names.DOMAIN]
            grants.append(Grant.on(info, part, int(caps["memory"] / q.MIB), int(caps["cores"]),
                                   partition=str(device.own("partition"))))
            rows.append(row)
        else:
            used = r.get("consumedCapacity") or {}
            memory = q.to_mib(used.get("memory", "0"), f"results[{i}].consumedCapacity.memory")
            cores = q.to_int(used.get("cores", str(FULL_CORES)), f"results[{i}].consumedCapacity.cores")
            grants.append(Grant.on(info, part, memory, cores, exclusive=cores >= FULL_CORES))
    return grants, rows, grants[0].node
