"""Faults during the run, made in the vendor library through the profile's fault injector.

Discovery saw every device healthy; then one goes bad, one disappears, and one's library calls
fail.  The adapter must say so within one monitoring call, refuse to grant on the bad device,
keep every raw library exception behind a typed HamiError, and leak nothing: allocations made
before the fault are released cleanly.
"""

from __future__ import annotations

from collections.abc import Callable

from hami_conformance.bench import Bench, CheckFailed, NotApplicable, expect, share
from hami_conformance.checks import check
from hami_conformance.facts import region_problems
from hami_conformance.invariants import bench_problems
from hami_conformance.profile import FaultInjector
from hami_devices.device import Device
from hami_devices.errors import HamiError, InsufficientResources, ReasonCode
from hami_devices.models import DeviceHandle, Health, Metrics


def _typed(what: str, action: Callable[[], object]) -> object | HamiError:
    """What ``action`` returned, or the HamiError it raised; any other exception fails the check."""
    try:
        return action()
    except HamiError as exc:
        return exc
    except Exception as exc:
        raise CheckFailed(f"{what}: raised {type(exc).__name__}: {exc}, expected a typed HamiError") from exc


def _held(bench: Bench, device: Device) -> DeviceHandle:
    return bench.recorded(bench.allocate_on(device, share(1, 0)))


def _released_cleanly(bench: Bench, handle: DeviceHandle, when: str) -> None:
    result = _typed(f"{when}: releasing {handle.id[:8]}", lambda: bench.release(handle))
    expect(not isinstance(result, HamiError), f"{when}: releasing an allocation made before the fault: {result}")
    expect(handle.id not in bench.live_ids(), f"{when}: the released allocation is still in the ledger")
    problems = region_problems(handle, live=False)
    expect(not problems, f"{when}: {'; '.join(problems)}")


def _refused(bench: Bench, device: Device, when: str, code: ReasonCode | None = None) -> None:
    result = _typed(f"{when}: allocating on it", lambda: bench.allocate_on(device, share(1, 0)))
    if isinstance(result, DeviceHandle):
        bench.release(result)
        raise CheckFailed(f"{when}: a share was granted on it")
    if code is not None:
        expect(
            isinstance(result, InsufficientResources) and code in result.reasons.get(device.uuid, []),
            f"{when}: allocating on it raised {result!r}, expected InsufficientResources with {code}",
        )


def _unhealthy(bench: Bench, faults: FaultInjector, device: Device) -> None:
    when = f"{device.uuid} after its health went bad"
    held = _held(bench, device)
    faults.unhealthy(device)
    metrics = _typed(f"{when}: monitor()", device.monitor)
    expect(
        isinstance(metrics, Metrics) and metrics.health == Health.UNHEALTHY,
        f"{when}: the next monitor() reports {getattr(metrics, 'health', metrics)!r}, expected unhealthy",
    )
    expect(device.refresh_health() == Health.UNHEALTHY, f"{when}: refresh_health() does not say unhealthy")
    _refused(bench, device, when, ReasonCode.CARD_UNHEALTHY)
    _released_cleanly(bench, held, when)


def _gone(bench: Bench, faults: FaultInjector, device: Device) -> None:
    when = f"{device.uuid} after it disappeared"
    held = _held(bench, device)
    faults.disappear(device)
    found = _typed(f"{when}: discovery", lambda: bench.target.factory(bench.ledger))
    if isinstance(found, list):
        again = [d for d in found if d.uuid == device.uuid]
        expect(
            all(not d.info.healthy for d in again),
            f"{when}: discovery still reports it healthy",
        )
    metrics = _typed(f"{when}: monitor()", device.monitor)
    expect(
        not isinstance(metrics, Metrics) or metrics.health == Health.UNHEALTHY,
        f"{when}: monitor() reports it {getattr(metrics, 'health', metrics)!r}, expected unhealthy or an error",
    )
    _typed(f"{when}: refresh_health()", device.refresh_health)
    _refused(bench, device, when)
    _released_cleanly(bench, held, when)


def _failing(bench: Bench, faults: FaultInjector, device: Device) -> None:
    when = f"{device.uuid} while its library calls fail"
    held = _held(bench, device)
    faults.fail_calls(device)
    for verb, call in (("monitor()", device.monitor), ("refresh_health()", device.refresh_health)):
        _typed(f"{when}: {verb}", call)
    _released_cleanly(bench, held, when)


def _recovered(bench: Bench, faults: FaultInjector, devices: list[Device]) -> None:
    faults.clear()
    for device in devices:
        health = _typed(f"{device.uuid} after the faults were cleared: refresh_health()", device.refresh_health)
        expect(health == Health.HEALTHY, f"{device.uuid}: healthy again in the library, the adapter says {health!r}")
        bench.release(_held(bench, device))


@check("faults.during-run")
def during_run(bench: Bench) -> None:
    faults = bench.target.profile.faults
    if faults is None:
        raise NotApplicable("the adapter's conformance_profile() gives no fault injector (Profile.faults)")
    group = bench.same_node_group(2)
    first, second = group[0], group[1]
    try:
        for fault, device in ((_unhealthy, first), (_gone, second), (_failing, first)):
            fault(bench, faults, device)
            _recovered(bench, faults, [first, second])
    finally:
        faults.clear()
    expect(not bench.live_ids(), f"allocations left after the faults: {sorted(bench.live_ids())}")
    problems = bench_problems(bench)
    expect(not problems, f"after the faults: {'; '.join(problems[:4])}")
