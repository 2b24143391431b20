"""MIG: the profile catalog per GPU model and the placement planner.

A MIG GPU has compute slices (7 on A100/H100/H200, 4 on A30) and memory slices
(8, or 4 on A30).  A GPU instance of a profile occupies ``memory_slices``
consecutive memory slices starting at one of the profile's valid placements,
and never overlaps another instance.  The planner is pure: it takes the
instances that exist (with their placements) and the ones the ledger holds but
that have no placement yet, and answers where a new instance can go.

``mig-mode`` (``device-plugin.mig-mode``) decides how the adapter uses MIG:

* ``disabled``: the SDK hands out no MIG instance and creates none.  Partition
  requests are refused, and a GPU whose MIG mode is on is not shared (CUDA only
  sees its MIG devices).
* ``strict``: only instances that already exist (made by an administrator) are
  handed out, each to one allocation; nothing is created or destroyed.
* ``flexible``: an instance of the smallest fitting profile is created at a
  valid placement when an allocation needs it and destroyed on release; a plain
  request on a MIG-enabled GPU is rounded up to a profile.

The figures are NVIDIA's published MIG profiles (MIG User Guide, "Supported
MIG Profiles").  Memory sizes are those the driver reports, in MiB, and are
approximate for the simulated back end: on hardware the adapter reads the
driver's own profile table through NVML.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hami_devices.models import PartitionProfile

# NVML's GPU instance profile indices (nvmlDeviceGetGpuInstanceProfileInfo's ``profile``).
PROFILE_1_SLICE = 0x0
PROFILE_2_SLICE = 0x1
PROFILE_3_SLICE = 0x2
PROFILE_4_SLICE = 0x3
PROFILE_7_SLICE = 0x4
PROFILE_8_SLICE = 0x5
PROFILE_6_SLICE = 0x6
PROFILE_1_SLICE_REV1 = 0x7  # 1g with media extensions (+me)
PROFILE_2_SLICE_REV1 = 0x8  # 2g with media extensions (+me)
PROFILE_1_SLICE_REV2 = 0x9  # 1g with two memory slices (1g.10gb on A100-40GB, 1g.20gb on 80 GB parts)
PROFILE_COUNT = 0x12

# The compute instance profile that spans a whole GPU instance of n compute slices.
FULL_COMPUTE_INSTANCE_PROFILE = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}


@dataclass(frozen=True)
class MigProfile:
    name: str
    nvml_index: int
    profile_id: int
    compute_slices: int
    memory_slices: int
    memory_mib: int
    sm_count: int
    max_instances: int
    placements: tuple[int, ...]

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True)
class MigGeometry:
    """The MIG layout of one GPU model."""

    model: str
    compute_slices: int
    memory_slices: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def by_id(self, profile_id: int) -> MigProfile | None:
        return next((p for p in self.profiles if p.profile_id == profile_id), None)

    def cores(self, profile: MigProfile) -> int:
        """The profile's compute share in percent of the whole GPU."""
        # Rounded down, so that any valid layout of instances sums to at most 100.
        return max(1, min(100, 100 * profile.compute_slices // self.compute_slices))

    def partition_profiles(self) -> list[PartitionProfile]:
        return [
            PartitionProfile(
                name=p.name,
                memory_mib=p.memory_mib,
                cores=self.cores(p),
                native={
                    "compute_slices": p.compute_slices,
                    "memory_slices": p.memory_slices,
                    "sm": p.sm_count,
                    "profile_id": p.profile_id,
                },
                max_instances=p.max_instances,
                placements=list(p.placements),
            )
            for p in self.profiles
        ]


def _eight_slice(model: str, names: Sequence[str], sizes: Sequence[tuple[int, int]]) -> MigGeometry:
    """A100/H100/H200 layout: 7 compute and 8 memory slices.

    ``names`` and ``sizes`` (MiB, SMs) go in this order: 1g, 1g+me, 1g with two
    memory slices, 2g, 3g, 4g, 7g.
    """
    shapes = (  # nvml index, profile id, compute slices, memory slices, instances, placements
        (PROFILE_1_SLICE, 19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
        (PROFILE_1_SLICE_REV1, 20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        (PROFILE_1_SLICE_REV2, 15, 1, 2, 4, (0, 2, 4, 6)),
        (PROFILE_2_SLICE, 14, 2, 2, 3, (0, 2, 4)),
        (PROFILE_3_SLICE, 9, 3, 4, 2, (0, 4)),
        (PROFILE_4_SLICE, 5, 4, 4, 1, (0,)),
        (PROFILE_7_SLICE, 0, 7, 8, 1, (0,)),
    )
    profiles = tuple(
        MigProfile(name, index, pid, cs, ms, mib, sms, count, starts)
        for name, (mib, sms), (index, pid, cs, ms, count, starts) in zip(names, sizes, shapes, strict=True)
    )
    return MigGeometry(model=model, compute_slices=7, memory_slices=8, profiles=profiles)


A30 = MigGeometry(
    model="A30",
    compute_slices=4,
    memory_slices=4,
    profiles=(
        MigProfile("1g.6gb", PROFILE_1_SLICE, 14, 1, 1, 5952, 14, 4, (0, 1, 2, 3)),
        MigProfile("1g.6gb+me", PROFILE_1_SLICE_REV1, 21, 1, 1, 5952, 14, 1, (0, 1, 2, 3)),
        MigProfile("2g.12gb", PROFILE_2_SLICE, 5, 2, 2, 11904, 28, 2, (0, 2)),
        MigProfile("2g.12gb+me", PROFILE_2_SLICE_REV1, 6, 2, 2, 11904, 28, 1, (0, 2)),
        MigProfile("4g.24gb", PROFILE_4_SLICE, 0, 4, 4, 23808, 56, 1, (0,)),
    ),
)
A100_40GB = _eight_slice(
    "A100-40GB",
    ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    [(4864, 14), (4864, 14), (9856, 14), (9856, 28), (19968, 42), (19968, 56), (40192, 98)],
)
A100_80GB = _eight_slice(
    "A100-80GB",
    ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    [(9728, 14), (9728, 14), (19968, 14), (19968, 28), (40192, 42), (40192, 56), (80896, 98)],
)
H100 = _eight_slice(
    "H100",
    ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    [(9984, 16), (9984, 16), (20096, 26), (20096, 32), (40448, 60), (40448, 64), (81152, 132)],
)
H200 = _eight_slice(
    "H200",
    ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
    [(17920, 16), (17920, 16), (35840, 26), (35840, 32), (71680, 60), (71680, 64), (143360, 132)],
)

CATALOG: dict[str, MigGeometry] = {g.model: g for g in (A30, A100_40GB, A100_80GB, H100, H200)}


def geometry_for(model: str) -> MigGeometry | None:
    """The MIG layout of a catalog model name (``A30``, ``A100-80GB``, ``H100`` ...), or None."""
    return CATALOG.get(model)


# ---------------------------------------------------------------- planning


@dataclass(frozen=True)
class MigInstance:
    """One GPU instance that exists (or is planned): its profile and where it sits."""

    profile: str
    start: int
    size: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    uuid: str | None = None

    def slots(self) -> range:
        return range(self.start, self.start + self.size)


@dataclass(frozen=True)
class Placement:
    profile: MigProfile
    start: int


def _slot_mask(start: int, size: int) -> int:
    """The memory slices ``[start, start + size)`` as bits."""
    return ((1 << size) - 1) << start if start >= 0 else ((1 << max(0, start + size)) - 1)


@dataclass
class _Held:
    """Instances summed up the way the placement rules read them: the memory slices they cover, the
    compute slices they take, and how many there are of each profile name."""

    memory: int
    compute: int
    counts: dict[str, int]


class _Layouts:
    """One geometry's placement tables, and the packings worked out on it so far.

    Whether a set of instances fits a GPU does not depend on the order they are placed in: the
    compute slices and the per-profile counts are sums, checked once, and what remains is whether
    their memory ranges can be laid out without overlap.  That is asked of (occupied slices, the
    profiles still to place) -- a few hundred states per model, at most -- and each answer is kept.
    """

    def __init__(self, geometry: MigGeometry) -> None:
        self.geometry = geometry
        self.index: dict[str, int] = {}
        for i, profile in enumerate(geometry.profiles):
            self.index.setdefault(profile.name, i)
        # Each profile's placements that lie inside the GPU, as (start, memory-slice bits), in the catalog's order.
        self.slots: tuple[tuple[tuple[int, int], ...], ...] = tuple(
            tuple(
                (start, _slot_mask(start, p.memory_slices))
                for start in p.placements
                if start + p.memory_slices <= geometry.memory_slices
            )
            for p in geometry.profiles
        )
        # Bigger instances first: they have the fewest placements, so a dead end shows early.
        self._order = {i: (-p.memory_slices, len(self.slots[i]), i) for i, p in enumerate(geometry.profiles)}
        self._packs: dict[tuple[int, tuple[int, ...]], bool] = {}
        self._ordered: dict[str | None, tuple[MigProfile, ...]] = {}
        self._plans: dict[tuple[object, ...], Placement | None] = {}
        self._waiting: dict[tuple[str, ...], tuple[int, ...]] = {}

    def held(self, instances: Iterable[tuple[int, int]]) -> _Held:
        """``instances`` as (profile index, start)."""
        held = _Held(0, 0, {})
        for i, start in instances:
            profile = self.geometry.profiles[i]
            held.memory |= _slot_mask(start, profile.memory_slices)
            held.compute += profile.compute_slices
            held.counts[profile.name] = held.counts.get(profile.name, 0) + 1
        return held

    def within_limits(self, held: _Held, added: Sequence[int]) -> bool:
        """Whether ``added`` (profile indices) next to ``held`` stay within the compute slices and each
        profile's instance count."""
        if not added:
            return True
        profiles = self.geometry.profiles
        if held.compute + sum(profiles[i].compute_slices for i in added) > self.geometry.compute_slices:
            return False
        names: dict[str, int] = {}
        for i in added:
            names[profiles[i].name] = names.get(profiles[i].name, 0) + 1
        limit = {name: profiles[self.index[name]].max_instances for name in names}
        return all(held.counts.get(name, 0) + n <= limit[name] for name, n in names.items())

    def canonical(self, pending: Iterable[int]) -> tuple[int, ...]:
        return tuple(sorted(pending, key=self._order.__getitem__))

    def waiting(self, names: tuple[str, ...]) -> tuple[int, ...]:
        """Profile names (those the geometry knows) in canonical order, kept per tuple of names."""
        known = self._waiting.get(names)
        if known is None:
            known = self.canonical(i for i in (self.index.get(n) for n in names) if i is not None)
            if len(self._waiting) > 1 << 14:
                self._waiting.clear()
            self._waiting[names] = known
        return known

    def packs(self, occupied: int, pending: tuple[int, ...]) -> bool:
        """Whether each of ``pending`` (canonical order) has a placement clear of ``occupied`` and of the others."""
        if not pending:
            return True
        key = (occupied, pending)
        known = self._packs.get(key)
        if known is None:
            head, rest = pending[0], pending[1:]
            known = any(not occupied & bits and self.packs(occupied | bits, rest) for _, bits in self.slots[head])
            if len(self._packs) > 1 << 16:  # only a geometry the driver made up could get here
                self._packs.clear()
            self._packs[key] = known
        return known

    def fits(self, held: _Held, added: Sequence[int]) -> bool:
        """Whether instances of ``added`` (profile indices) can all be placed next to ``held``."""
        return self.within_limits(held, added) and self.packs(held.memory, self.canonical(added))

    def plan(
        self, fixed: tuple[tuple[int, int], ...], waiting: tuple[int, ...], memory_mib: int, cores: int,
        name: str | None,
    ) -> Placement | None:
        """``plan_new_instance`` over profile indices: ``fixed`` (profile, start) pairs, sorted, and the
        ``waiting`` profiles in canonical order.  Many GPUs of a fleet are in the same state, so answers are kept."""
        key = (fixed, waiting, memory_mib, cores, name)
        if key in self._plans:
            return self._plans[key]
        held = self.held(fixed)
        found = None
        for profile in self.ordered(name):
            if profile.memory_mib < memory_mib or self.geometry.cores(profile) < cores:
                continue
            i = self.index[profile.name]
            if not self.within_limits(held, [*waiting, i]):
                continue
            found = next(
                (Placement(profile, start) for start, bits in self.slots[i]
                 if not held.memory & bits and self.packs(held.memory | bits, waiting)),
                None,
            )
            if found is not None:
                break
        if len(self._plans) > 1 << 16:
            self._plans.clear()
        self._plans[key] = found
        return found

    def ordered(self, name: str | None) -> tuple[MigProfile, ...]:
        """The profiles a request may get, smallest first (media-extension profiles only by name)."""
        kept = self._ordered.get(name)
        if kept is None:
            if name not in (None, "auto"):
                profiles = [p for p in self.geometry.profiles if p.name == name]
            else:
                profiles = [p for p in self.geometry.profiles if not p.media_extensions]
            kept = tuple(sorted(profiles, key=lambda p: (p.memory_mib, p.compute_slices, p.memory_slices, p.name)))
            if len(self._ordered) > 256:  # names come from requests: keep the many a client could send bounded
                self._ordered.clear()
            self._ordered[name] = kept
        return kept


_LAYOUTS: dict[int, tuple[MigGeometry, _Layouts]] = {}


def _layouts(geometry: MigGeometry) -> _Layouts:
    """The tables of ``geometry``, built once per geometry object (kept alive here, so its id stays its own)."""
    kept = _LAYOUTS.get(id(geometry))
    if kept is None:
        if len(_LAYOUTS) > 256:  # the catalog's five, plus what the drivers of this process reported
            _LAYOUTS.clear()
        kept = _LAYOUTS[id(geometry)] = (geometry, _Layouts(geometry))
    return kept[1]


def _known(layouts: _Layouts, instances: Iterable[MigInstance]) -> list[tuple[int, int]]:
    """Instances of profiles the geometry knows, as (profile index, start)."""
    out: list[tuple[int, int]] = []
    for inst in instances:
        i = layouts.index.get(inst.profile)
        if i is not None:
            out.append((i, inst.start))
    return out


def packs(geometry: MigGeometry, profiles: Sequence[MigProfile], existing: Sequence[MigInstance] = ()) -> bool:
    """Whether one instance of each of ``profiles`` (repeats allowed) can be placed next to ``existing``."""
    layouts = _layouts(geometry)
    held = layouts.held(_known(layouts, existing))
    return layouts.fits(held, [layouts.index[p.name] for p in profiles])


def candidates(
    geometry: MigGeometry, memory_mib: int, cores: int, name: str | None = "auto"
) -> list[MigProfile]:
    """Profiles that satisfy a request, smallest first (media-extension profiles only by name)."""
    return [
        p for p in _layouts(geometry).ordered(name) if p.memory_mib >= memory_mib and geometry.cores(p) >= cores
    ]


def plan_new_instance(
    geometry: MigGeometry,
    existing: Sequence[MigInstance],
    pending: Sequence[str],
    memory_mib: int,
    cores: int,
    name: str | None = "auto",
) -> Placement | None:
    """The smallest profile that fits the request and a placement valid next to the instances.

    ``existing`` have fixed placements; ``pending`` are profile names the ledger
    holds without a known placement (simulated devices), which must still fit.
    Of the placements of that profile, the first (in NVIDIA's order) with which
    the pending instances still fit.
    """
    layouts = _layouts(geometry)
    fixed = tuple(sorted(_known(layouts, existing))) if existing else ()
    return layouts.plan(fixed, layouts.waiting(tuple(pending)), memory_mib, cores, name)


def free_existing(
    geometry: MigGeometry, existing: Sequence[MigInstance], held: Sequence[str], held_uuids: Iterable[str] = ()
) -> list[MigInstance]:
    """Existing instances no allocation holds.

    With the held instances' uuids the answer is exact; with only their profile
    names, the first instances of each profile (by placement) count as held.
    """
    uuids = set(held_uuids)
    if uuids:
        return [i for i in existing if i.uuid not in uuids]
    remaining = {name: held.count(name) for name in set(held)}
    free: list[MigInstance] = []
    for inst in sorted(existing, key=lambda i: (i.profile, i.start)):
        if remaining.get(inst.profile, 0) > 0:
            remaining[inst.profile] -= 1
        else:
            free.append(inst)
    return sorted(free, key=lambda i: i.start)


def pick_existing(
    geometry: MigGeometry, free: Sequence[MigInstance], memory_mib: int, cores: int, name: str | None = "auto"
) -> MigInstance | None:
    """The free existing instance of the smallest fitting profile (strict mode)."""
    for profile in candidates(geometry, memory_mib, cores, name):
        for inst in free:
            if inst.profile == profile.name:
                return inst
    return None


def free_profiles(geometry: MigGeometry, existing: Sequence[MigInstance]) -> dict[str, int]:
    """How many more instances of each profile fit next to ``existing`` (each profile alone)."""
    layouts = _layouts(geometry)
    held = layouts.held(_known(layouts, existing))
    counts: dict[str, int] = {}
    for profile in geometry.profiles:
        i = layouts.index[profile.name]
        n = 0
        while n < profile.max_instances and layouts.fits(held, [i] * (n + 1)):
            n += 1
        counts[profile.name] = n
    return counts
