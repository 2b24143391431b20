"""The MIG planner against a brute force written from NVIDIA's placement rules.

The oracle knows only what NVIDIA documents for each GPU model (MIG User Guide, "Supported MIG
Profiles", and ``nvidia-smi mig -lgipp``): each GPU instance profile's compute slices, the memory
slices it spans, its possible start slices and how many instances of it a GPU holds, plus the
memory the driver reports for it.  A set of instances is a valid layout when their memory ranges do
not overlap, their compute slices fit the GPU, and no profile has more instances than allowed.  The
oracle lists every valid layout of a model by exhaustive search, and answers a question by looking
the layouts up; nothing of the product's planner is imported.

A request gets the smallest profile that satisfies it (least memory, then fewest compute slices;
``auto`` never picks a media-extension profile, a name picks exactly that profile), and of that
profile the first start, in NVIDIA's order, with which the instances waiting for a placement still fit.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hami_nvidia import partitions
from hypothesis import given, settings
from hypothesis import strategies as st

import hami_devices as hd
from hami_devices.config import parse_config
from hami_devices.errors import InsufficientResources
from hami_devices.ledger import MemoryLedger
from hami_devices.scheduler import Inventory


@dataclass(frozen=True)
class Doc:
    """One profile as NVIDIA documents it."""

    compute: int
    size: int  # memory slices spanned
    instances: int
    starts: tuple[int, ...]
    mib: int  # memory the driver reports
    media: bool = False


def _eight_slice(names: list[str], mib: list[int]) -> dict[str, Doc]:
    # A100 / H100 / H200: 7 compute slices, 8 memory slices.
    shapes = [(1, 1, 7, tuple(range(7)), False), (1, 1, 1, tuple(range(7)), True), (1, 2, 4, (0, 2, 4, 6), False),
              (2, 2, 3, (0, 2, 4), False), (3, 4, 2, (0, 4), False), (4, 4, 1, (0,), False), (7, 8, 1, (0,), False)]
    return {n: Doc(c, s, k, st_, m, me) for n, m, (c, s, k, st_, me) in zip(names, mib, shapes, strict=True)}


NVIDIA: dict[str, tuple[int, int, dict[str, Doc]]] = {  # model: (compute slices, memory slices, profiles)
    "A30": (4, 4, {
        "1g.6gb": Doc(1, 1, 4, (0, 1, 2, 3), 5952),
        "1g.6gb+me": Doc(1, 1, 1, (0, 1, 2, 3), 5952, True),
        "2g.12gb": Doc(2, 2, 2, (0, 2), 11904),
        "2g.12gb+me": Doc(2, 2, 1, (0, 2), 11904, True),
        "4g.24gb": Doc(4, 4, 1, (0,), 23808),
    }),
    "A100-80GB": (7, 8, _eight_slice(
        ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
        [9728, 9728, 19968, 19968, 40192, 40192, 80896])),
    "H100": (7, 8, _eight_slice(
        ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
        [9984, 9984, 20096, 20096, 40448, 40448, 81152])),
}
MODELS = sorted(NVIDIA)

Instance = tuple[str, int]  # (profile, start)


@functools.cache
def layouts(model: str) -> dict[tuple[tuple[str, int], ...], list[frozenset[Instance]]]:
    """Every valid layout of the model, by the multiset of its profiles (sorted (name, count) pairs)."""
    compute, memory, docs = NVIDIA[model]
    places = [(n, s) for n, d in docs.items() for s in d.starts]
    found: dict[tuple[tuple[str, int], ...], list[frozenset[Instance]]] = {}

    def valid(chosen: list[Instance]) -> bool:
        ranges = [(s, s + docs[n].size) for n, s in chosen]
        if any(stop > memory for _, stop in ranges):
            return False
        if any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(ranges) for b in ranges[i + 1:]):
            return False
        if sum(docs[n].compute for n, _ in chosen) > compute:
            return False
        return all(c <= docs[n].instances for n, c in Counter(n for n, _ in chosen).items())

    def search(i: int, chosen: list[Instance]) -> None:
        if i == len(places):
            key = tuple(sorted(Counter(n for n, _ in chosen).items()))
            found.setdefault(key, []).append(frozenset(chosen))
            return
        search(i + 1, chosen)
        if valid([*chosen, places[i]]):
            search(i + 1, [*chosen, places[i]])

    search(0, [])
    return found


def fits(model: str, fixed: list[Instance], pending: list[str]) -> bool:
    """Whether the waiting profiles can be placed next to the fixed instances (some valid layout holds all)."""
    if len(set(fixed)) < len(fixed):
        return False  # two instances at one placement
    key = tuple(sorted((Counter(n for n, _ in fixed) + Counter(pending)).items()))
    return any(set(fixed) <= layout for layout in layouts(model).get(key, []))


def cores(model: str, name: str) -> int:
    """A profile's share of the GPU's compute in percent, rounded down (at least 1)."""
    compute, _, docs = NVIDIA[model]
    return max(1, min(100, 100 * docs[name].compute // compute))


def expected_plan(
    model: str, fixed: list[Instance], pending: list[str], memory: int, want_cores: int, name: str | None
) -> Instance | None:
    _, _, docs = NVIDIA[model]
    by_name = name not in (None, "auto")
    allowed = [n for n, d in docs.items() if (n == name if by_name else not d.media)]
    satisfying = [n for n in allowed if docs[n].mib >= memory and cores(model, n) >= want_cores]
    for n in sorted(satisfying, key=lambda n: (docs[n].mib, docs[n].compute, docs[n].size, n)):
        for start in docs[n].starts:
            if fits(model, [*fixed, (n, start)], pending):
                return (n, start)
    return None


@st.composite
def gpu_states(draw: Any) -> tuple[str, list[Instance], list[str]]:
    """A model, instances with placements, and profiles waiting for one: a valid layout split in two,
    sometimes with one more waiting profile that may not fit."""
    model = draw(st.sampled_from(MODELS))
    every = [layout for group in layouts(model).values() for layout in group]
    layout = sorted(every[draw(st.integers(0, len(every) - 1))])
    fixed_flags = draw(st.lists(st.booleans(), min_size=len(layout), max_size=len(layout)))
    fixed = [inst for inst, keep in zip(layout, fixed_flags, strict=True) if keep]
    pending = [n for (n, _), keep in zip(layout, fixed_flags, strict=True) if not keep]
    if draw(st.booleans()):
        pending.append(draw(st.sampled_from(sorted(NVIDIA[model][2]))))
    return model, fixed, pending


def _existing(model: str, fixed: list[Instance]) -> list[partitions.MigInstance]:
    return [partitions.MigInstance(n, s, NVIDIA[model][2][n].size) for n, s in fixed]


def _name_for(model: str) -> Any:
    return st.sampled_from(["auto", None, "9g.1tb", *sorted(NVIDIA[model][2])])


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(state=gpu_states(), data=st.data())
def test_planner_matches_the_brute_force(state: tuple[str, list[Instance], list[str]], data: Any) -> None:
    model, fixed, pending = state
    memory = data.draw(st.sampled_from([0, 1, 5952, 5953, 9728, 9800, 11904, 19968, 20000, 23808, 40192, 40449,
                                        80000, 81153]))
    want_cores = data.draw(st.sampled_from([0, 10, 14, 25, 28, 42, 50, 57, 100]))
    name = data.draw(_name_for(model))
    geometry = partitions.geometry_for(model)
    assert geometry is not None
    placed = partitions.plan_new_instance(geometry, _existing(model, fixed), pending, memory, want_cores, name)
    got = None if placed is None else (placed.profile.name, placed.start)
    assert got == expected_plan(model, fixed, pending, memory, want_cores, name)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(state=gpu_states())
def test_free_profiles_match_the_brute_force(state: tuple[str, list[Instance], list[str]]) -> None:
    model, fixed, _ = state
    geometry = partitions.geometry_for(model)
    assert geometry is not None
    expected = {}
    for name, doc in NVIDIA[model][2].items():
        n = 0
        while n < doc.instances and fits(model, fixed, [name] * (n + 1)):
            n += 1
        expected[name] = n
    assert partitions.free_profiles(geometry, _existing(model, fixed)) == expected


# ---------------------------------------------------------------- through the SDK, several models at once

FLEET = [("A30", 1), ("A100-80GB", 1), ("H100", 1)]
CONFIG = parse_config({"device-plugin": {"mig-mode": "flexible", "isolation-level": "none"}})


@functools.cache
def _inventory() -> Inventory:
    from hami_devices.inventory import parse_inventory

    groups = [{"vendor": "nvidia", "model": m, "count": c} for m, c in FLEET]
    return parse_inventory({"nodes": [{"name": "mig-0", "devices": groups}]})


MIG_REQUEST = st.fixed_dictionaries({
    "models": st.sampled_from([["A30", "A100-80GB", "H100"], ["A100-80GB", "H100"], ["A30", "H100"], ["A30"]]),
    "partition": st.sampled_from(["auto", "auto", "1g.10gb", "1g.20gb", "2g.20gb", "2g.12gb", "3g.40gb", "7g.80gb"]),
    "memory_mib": st.sampled_from([1024, 6000, 9800, 12000, 20000, 23000, 40000]),
})


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(steps=st.lists(st.one_of(MIG_REQUEST, st.integers(0, 7)), min_size=4, max_size=10))
def test_requests_over_several_models_get_what_the_brute_force_allows(steps: list[Any]) -> None:
    """Each MIG request on a fleet of A30, A100-80GB and H100 is granted exactly when some allowed GPU has a
    valid layout for it, and then gets the profile the rules give on the GPU it lands on; an integer step
    releases a live allocation.  Simulated GPUs keep no placement: what they hold is a list of profiles."""
    devices = hd.discover(_inventory(), config=CONFIG, ledger=MemoryLedger())
    held: dict[str, list[str]] = {d.uuid: [] for d in devices}
    model_of = {d.uuid: d.info.model for d in devices}
    live: list[hd.DeviceHandle] = []
    for step in steps:
        if isinstance(step, int):
            if live:
                handle = live.pop(step % len(live))
                hd.release(handle)
                for g in handle.grants:
                    held[g.uuid].remove(g.partition or "")
            continue
        part = dict(step)
        allowed = {
            uuid: expected_plan(model_of[uuid], [], [*names], part["memory_mib"], 0, part["partition"])
            for uuid, names in held.items() if model_of[uuid] in part["models"]
        }
        possible = {uuid: plan[0] for uuid, plan in allowed.items() if plan is not None}
        try:
            handle = hd.allocate(devices, {"parts": [part]})
        except InsufficientResources:
            assert not possible, f"refused though {possible} fit"
            continue
        (grant,) = handle.grants
        assert grant.uuid in possible and grant.partition == possible[grant.uuid]
        held[grant.uuid].append(grant.partition)
        live.append(handle)
        # The grant names its instance as on hardware: a MIG device uuid, the one CUDA is shown.
        assert grant.partition_uuid is not None and grant.partition_uuid.startswith("MIG-")
        assert handle.environments[f"{grant.node}/nvidia"]["CUDA_VISIBLE_DEVICES"] == grant.partition_uuid
        ids = [g.partition_uuid for h in live for g in h.grants if g.uuid == grant.uuid]
        assert len(ids) == len(set(ids))
