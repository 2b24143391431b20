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

import itertools
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


def _fits(
    geometry: MigGeometry, occupied: Sequence[tuple[MigProfile, int]], profile: MigProfile, start: int
) -> bool:
    if start not in profile.placements:
        return False
    if sum(1 for p, _ in occupied if p.name == profile.name) >= profile.max_instances:
        return False
    if sum(p.compute_slices for p, _ in occupied) + profile.compute_slices > geometry.compute_slices:
        return False
    new = range(start, start + profile.memory_slices)
    if new.stop > geometry.memory_slices:
        return False
    return all(not (s < new.stop and new.start < s + p.memory_slices) for p, s in occupied)


def _place_all(
    geometry: MigGeometry, occupied: list[tuple[MigProfile, int]], pending: Sequence[MigProfile]
) -> list[tuple[MigProfile, int]] | None:
    """Placements for every pending profile next to ``occupied`` (backtracking), or None."""
    if not pending:
        return occupied
    head, rest = pending[0], pending[1:]
    for start in head.placements:
        if _fits(geometry, occupied, head, start):
            placed = _place_all(geometry, [*occupied, (head, start)], rest)
            if placed is not None:
                return placed
    return None


def _known(geometry: MigGeometry, instances: Iterable[MigInstance]) -> list[tuple[MigProfile, int]]:
    out: list[tuple[MigProfile, int]] = []
    for inst in instances:
        profile = geometry.profile(inst.profile)
        if profile is not None:
            out.append((profile, inst.start))
    return out


def candidates(
    geometry: MigGeometry, memory_mib: int, cores: int, name: str | None = "auto"
) -> list[MigProfile]:
    """Profiles that satisfy a request, smallest first (media-extension profiles only by name)."""
    if name not in (None, "auto"):
        profiles = [p for p in geometry.profiles if p.name == name]
    else:
        profiles = [p for p in geometry.profiles if not p.media_extensions]
    fitting = [p for p in profiles if p.memory_mib >= memory_mib and geometry.cores(p) >= cores]
    return sorted(fitting, key=lambda p: (p.memory_mib, p.compute_slices, p.memory_slices, p.name))


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
    """
    fixed = _known(geometry, existing)
    pending_profiles = [p for p in (geometry.profile(n) for n in pending) if p is not None]
    for profile in candidates(geometry, memory_mib, cores, name):
        for start in profile.placements:
            if not _fits(geometry, fixed, profile, start):
                continue
            if _place_all(geometry, [*fixed, (profile, start)], pending_profiles) is not None:
                return Placement(profile, start)
    return None


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
    fixed = _known(geometry, existing)
    counts: dict[str, int] = {}
    for profile in geometry.profiles:
        n = 0
        for k in range(1, profile.max_instances + 1):
            if _place_all(geometry, list(fixed), list(itertools.repeat(profile, k))) is None:
                break
            n = k
        counts[profile.name] = n
    return counts
