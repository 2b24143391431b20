"""Allocation: within capacity, over capacity, exclusivity, split count, health."""

from __future__ import annotations

from collections.abc import Callable, Collection

from hami_conformance.bench import Bench, CheckFailed, capacity, expect, profiles_of, share
from hami_conformance.checks import check
from hami_conformance.invariants import device_problems, grant_problems, rounded
from hami_devices.device import Device
from hami_devices.errors import InsufficientResources, ReasonCode
from hami_devices.models import DeviceHandle, Health


def expect_refused(
    action: Callable[[], DeviceHandle],
    what: str,
    device: Device,
    codes: Collection[ReasonCode] | None = None,
) -> InsufficientResources:
    """Run ``action``; it must raise InsufficientResources with a reason code for ``device``."""
    try:
        handle = action()
    except InsufficientResources as exc:
        found = exc.reasons.get(device.uuid) or [c for cs in exc.reasons.values() for c in cs]
        expect(found, f"{what}: InsufficientResources carries no reason code ({exc})")
        expect(all(isinstance(c, ReasonCode) for c in found), f"{what}: reasons {found!r} are not ReasonCodes")
        if codes is not None:
            expect(
                set(found) & set(codes),
                f"{what}: refused with {sorted(found)}, expected one of {sorted(str(c) for c in codes)}",
            )
        return exc
    except Exception as exc:
        raise CheckFailed(f"{what}: raised {type(exc).__name__}: {exc}, expected InsufficientResources") from exc
    grants = ", ".join(f"{g.uuid}: {g.memory_mib} MiB/{g.cores}%" for g in handle.grants)
    raise CheckFailed(f"{what}: was granted ({grants}) but the device cannot hold it")


def expect_clean(bench: Bench, device: Device) -> None:
    problems = device_problems(bench, device)
    expect(not problems, "; ".join(problems))


def granted_on(bench: Bench, device: Device) -> tuple[int, int]:
    """Memory and cores the device's live grants hold."""
    usage = bench.state(device).usage
    return usage.memory_mib, usage.cores


@check("alloc.within-capacity")
def within_capacity(bench: Bench) -> None:
    device = bench.device()
    cap = capacity(device)
    memory, cores = max(1, cap.memory_mib // 4), min(25, cap.cores)
    before = bench.state(device).usage
    try:
        handle = bench.allocate_on(device, share(memory, cores))
    except InsufficientResources as exc:
        raise CheckFailed(f"{memory} MiB/{cores}% refused on an empty device of {cap.memory_mib} MiB: {exc}") from exc
    handle = bench.recorded(handle)
    expect(len(handle.grants) == 1, f"one-device request got {len(handle.grants)} grants")
    grant = handle.grants[0]
    expect(grant.uuid == device.uuid, f"grant on {grant.uuid}, the request was made on {device.uuid}")
    problems = grant_problems(device, handle, grant)
    expect(not problems, "; ".join(problems))
    if not rounded(device, handle):
        expect(
            (grant.memory_mib, grant.cores) == (memory, cores),
            f"asked {memory} MiB/{cores}%, granted {grant.memory_mib} MiB/{grant.cores}%",
        )
    after = bench.state(device).usage
    expect(
        (after.memory_mib - before.memory_mib, after.cores - before.cores, after.sharers - before.sharers)
        == (grant.memory_mib, grant.cores, 1),
        f"usage went from {before} to {after} for one grant of {grant.memory_mib} MiB/{grant.cores}%",
    )
    expect_clean(bench, device)


@check("alloc.fill-to-capacity")
def fill_to_capacity(bench: Bench) -> None:
    device = bench.device()
    cap = capacity(device)
    n = max(1, min(4, cap.split_count, cap.memory_mib))
    unit = 256 if cap.memory_mib % 256 == 0 and cap.memory_mib >= 256 * n else 1  # vendors' usual memory unit
    sizes = [cap.memory_mib // unit // n * unit] * n
    sizes[-1] += cap.memory_mib - sum(sizes)
    for size in sizes:
        try:
            bench.allocate_on(device, share(size, 0))
        except InsufficientResources as exc:
            taken = bench.state(device).usage.memory_mib
            raise CheckFailed(f"{size} MiB refused with {taken} of {cap.memory_mib} MiB taken: {exc}") from exc
    expect(bench.state(device).usage.memory_mib == cap.memory_mib, "the device is not exactly full")
    expect_clean(bench, device)


@check("alloc.over-capacity-refused")
def over_capacity(bench: Bench) -> None:
    device = bench.device()
    cap = capacity(device)
    before = bench.state(device)
    expect_refused(
        lambda: bench.allocate_on(device, share(cap.memory_mib + 1, 0)),
        f"{cap.memory_mib + 1} MiB on an empty device of {cap.memory_mib} MiB",
        device,
        {ReasonCode.CARD_INSUFFICIENT_MEMORY, ReasonCode.CARD_PARTITION_UNAVAILABLE},
    )
    after = bench.state(device)
    expect(after == before, f"a refused request changed the device: {before.differences(after)}")
    bench.allocate_on(device, share(cap.memory_mib // 2, 0))
    free = cap.memory_mib - granted_on(bench, device)[0]
    expect_refused(
        lambda: bench.allocate_on(device, share(free + 1, 0)),
        f"{free + 1} MiB with {free} MiB free",
        device,
    )
    if cap.split_count >= 4:
        for _ in range(cap.split_count - 2):
            if granted_on(bench, device)[1] + 50 > cap.cores:
                break
            try:
                bench.allocate_on(device, share(1, 50))
            except InsufficientResources:
                break
        free_cores = cap.cores - granted_on(bench, device)[1]
        if 0 <= free_cores < 100:
            expect_refused(
                lambda: bench.allocate_on(device, share(1, free_cores + 1)),
                f"{free_cores + 1}% cores with {free_cores}% free",
                device,
            )
    expect_clean(bench, device)


@check("alloc.exclusive")
def exclusive(bench: Bench) -> None:
    device = bench.device()
    handle = bench.allocate_on(device, share(1, 100))
    expect(handle.grants[0].exclusive, "a request with cores 100 did not get an exclusive grant")
    expect_refused(lambda: bench.allocate_on(device, share(1, 0)), "a sharer next to an exclusive holder", device)
    expect_refused(lambda: bench.allocate_on(device, share(1, 100)), "a second exclusive holder", device)
    bench.release(handle)
    bench.allocate_on(device, share(1, 0))
    expect_refused(lambda: bench.allocate_on(device, share(1, 100)), "an exclusive request on a shared device", device)
    expect_clean(bench, device)


@check("alloc.split-count")
def split_count(bench: Bench) -> None:
    """Fill the device with the smallest split count; adapters that round shares up may run out first.

    Devices that share whole come first: on a partitioned one shares become profiles, and the
    device may run out of room (CardPartitionUnavailable) exactly as its split count is reached.
    """
    candidates = sorted(
        bench.healthy(), key=lambda d: (bool(profiles_of(d)), d.info.split_count, -d.info.memory_mib)
    )
    expect(candidates, "no healthy device")
    short: list[str] = []
    for device in candidates:
        cap = capacity(device)
        handles = []
        refusal: InsufficientResources | None = None
        for _ in range(cap.split_count):
            try:
                handles.append(bench.allocate_on(device, share(1, 0)))
            except InsufficientResources as exc:
                refusal = exc
                break
        if refusal is not None:
            if not any(rounded(device, h) for h in handles):
                raise CheckFailed(f"sharer {len(handles) + 1} of split count {cap.split_count} was refused: {refusal}")
            short.append(
                f"{device.type}: {len(handles)} rounded-up shares filled it before split count {cap.split_count}"
            )
            for handle in handles:
                bench.release(handle)
            continue
        codes = {ReasonCode.CARD_SPLIT_EXHAUSTED}
        if any(rounded(device, h) for h in handles):
            codes |= {ReasonCode.CARD_PARTITION_UNAVAILABLE, ReasonCode.CARD_INSUFFICIENT_MEMORY}
        expect_refused(
            lambda device=device: bench.allocate_on(device, share(1, 0)),  # type: ignore[misc]
            f"sharer {cap.split_count + 1} with split count {cap.split_count}",
            device,
            codes,
        )
        expect_clean(bench, device)
        return
    raise CheckFailed(
        "no device reached its split count: " + "; ".join(short) + " (give an inventory with a smaller split_count)"
    )


@check("alloc.unhealthy-refused")
def unhealthy_refused(bench: Bench) -> None:
    sick = [d for d in bench.devices if not d.info.healthy]
    if not sick:
        model = bench.device().info
        info = model.model_copy(
            update={
                "uuid": f"{model.uuid}-conformance-sick",
                "index": max(d.info.index for d in bench.devices) + 1,
                "health": Health.UNHEALTHY,
                "health_reason": "marked unhealthy by the conformance suite",
                "topology": {},
            }
        )
        sick = bench.adapter.simulate([info], bench.ledger)
        expect(len(sick) == 1, f"simulate() of one DeviceInfo returned {len(sick)} devices")
        bench.devices.extend(sick)
    for device in sick:
        expect_refused(
            lambda device=device: bench.allocate_on(device, share(1, 0)),  # type: ignore[misc]
            f"a share of unhealthy {device.uuid}",
            device,
            {ReasonCode.CARD_UNHEALTHY},
        )
        expect_refused(
            lambda device=device: bench.allocate_many(bench.devices, share(1, 0, uuids=[device.uuid])),  # type: ignore[misc]
            f"a request naming unhealthy {device.uuid}",
            device,
            {ReasonCode.CARD_UNHEALTHY},
        )
        expect(not list(bench.ledger.grants_on(device.uuid)), f"unhealthy {device.uuid} holds grants")
