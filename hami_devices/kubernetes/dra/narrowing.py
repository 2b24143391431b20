"""Narrowing a claim's requests to engine parts: the devices a (class, selectors) pair selects, the ways to
serve each request (shares of a card, or a partition profile), capacity requests and ``matchAttribute``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from hami_devices.errors import InsufficientResources, InvalidRequest
from hami_devices.kubernetes import quantity as q
from hami_devices.kubernetes.dra import names
from hami_devices.kubernetes.dra.catalog import Catalog
from hami_devices.kubernetes.dra.claims import ALL, Claim, SubRequest
from hami_devices.models import RequestPart
from hami_devices.scheduling.cluster import BoolArray
from hami_devices.scheduling.engine import Engine

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
class Devices:
    """A set of cards (or of partition devices grouped by card) in the three forms the search reads."""

    rows: dict[str, list[int]]
    uuids: list[str]
    mask: BoolArray


class Narrowing:
    """What a claim's requests can be served by, over one allocator's published devices.

    Published devices do not change within an allocator, so what a (class, selectors) pair selects --
    and how those rows split into cards and partitions, the share and profile groups, parsed capacities
    and attribute texts -- is computed once and remembered here.
    """

    def __init__(
        self, catalog: Catalog, engine: Engine, classes: dict[str, list[str]], memory_factor: float, ours: list[int]
    ) -> None:
        self.catalog = catalog
        self.engine = engine
        self.classes = classes
        self.memory_factor = memory_factor
        self.ours = ours
        # Per catalog row, read once: its card's uuid (a partition device's is its card's) and its kind.
        self.uuid_of = [str(d.own("uuid")) for d in catalog.devices]
        self._kind_of = [d.kind for d in catalog.devices]
        self._selected: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        self._split: dict[tuple[Any, ...], tuple[list[int], list[int]]] = {}
        self._shares: dict[tuple[Any, ...], list[Devices]] = {}
        self._profiles: dict[tuple[Any, ...], list[tuple[str, Devices]]] = {}
        self._capacities: dict[tuple[tuple[str, str], ...], tuple[int | None, int, dict[str, Decimal]]] = {}
        self._attribute_text: dict[tuple[int, str], str] = {}

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
        rows = list(self.ours)
        env = self.catalog.env
        for expression in selectors:
            rows = env.select(expression, rows, claim.label, f"{sub.name} (class {sub.device_class})")
        for expression in sub.selectors:
            rows = env.select(expression, rows, claim.label, sub.name)
        return rows

    def options(self, claim: Claim, alternatives: Sequence[SubRequest]) -> list[Option]:
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
    ) -> list[tuple[str, Devices]]:
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
                grouped.setdefault(self.uuid_of[r], []).append(r)
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
            by_uuid = {self.uuid_of[r]: [r] for r in rows}
            if sub.mode != ALL:
                groups = [self._devices(by_uuid)]
            else:
                nodes: dict[str, list[str]] = {}
                for r in rows:
                    nodes.setdefault(self.catalog.devices[r].node, []).append(self.uuid_of[r])
                ordered = sorted(nodes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
                groups = [self._devices({x: by_uuid[x] for x in u}) for _, u in ordered]
            self._shares[key] = groups
        if sub.mode != ALL:
            return [Option(sub, part(sub.count), g.rows, g.uuids, g.mask) for g in groups]
        return [Option(sub, part(len(g.uuids)), g.rows, g.uuids, g.mask) for g in groups]

    def _devices(self, rows: dict[str, list[int]]) -> Devices:
        uuids = sorted(rows)
        index = self.engine.cluster.uuid_index
        mask = np.zeros(self.engine.cluster.size, dtype=bool)
        mask[[index[u] for u in uuids if u in index]] = True  # as the engine reads a uuid list
        return Devices(rows, uuids, mask)

    def option(self, sub: SubRequest, part: RequestPart, rows: dict[str, list[int]]) -> Option:
        devices = self._devices(rows)
        return Option(sub, part, devices.rows, devices.uuids, devices.mask)

    def attribute(self, row: int, qualified: str) -> str:
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

    def matched_variants(self, claim: Claim, per_request: list[list[Option]]) -> Iterable[list[list[Option]]]:
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
                            text = self.attribute(rows[0], constraint.match)
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
                            not c.applies(request.name) or self.attribute(rs[0], c.match or "") == v
                            for c, v in zip(matches, values, strict=True)
                        )
                    }
                    if kept_rows:
                        count = len(kept_rows) if o.sub.mode == ALL else o.part.count
                        kept.append(self.option(o.sub, o.part.model_copy(update={"count": count}), kept_rows))
                narrowed.append(kept)
            if all(narrowed):
                yield narrowed
