"""Bad input: typed errors naming the field, and nothing allocated."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from hami_conformance.bench import Bench, CheckFailed, expect, profiles_of, share
from hami_conformance.checks import check
from hami_conformance.checks.allocation import expect_refused
from hami_devices.adapter import Capability
from hami_devices.errors import HamiError, InsufficientResources, InvalidRequest, ReasonCode

MALFORMED: list[tuple[Any, str]] = [
    ({"parts": [{"memory_mib": -1}]}, "parts.0.memory_mib"),
    ({"parts": [{"memory_mib": 0}]}, "parts.0.memory_mib"),
    ({"parts": [{"count": 0}]}, "parts.0.count"),
    ({"parts": [{"count": -2}]}, "parts.0.count"),
    ({"parts": [{"cores": -5}]}, "parts.0.cores"),
    ({"parts": [{"cores": 101}]}, "parts.0.cores"),
    ({"parts": [{"memory_percent": 150}]}, "parts.0.memory_percent"),
    ({"parts": [{"memory_mib": 1, "bogus": 1}]}, "parts.0.bogus"),
    ({"parts": [{"memory_mib": "lots"}]}, "parts.0.memory_mib"),
    ({"parts": [{"memory_mib": 1, "memory_percent": 10}]}, "parts.0"),
    ({"parts": []}, "parts"),
    ({"parts": [{"memory_mib": 1}], "mystery": True}, "mystery"),
    ({"parts": [{"memory_mib": 1}], "latency_slo_ms": -1}, "latency_slo_ms"),
    ({}, "parts"),
    ("memory: lots", "<request>"),
    (42, "<request>"),
]


@check("badinput.typed-errors")
def typed_errors(bench: Bench) -> None:
    device = bench.device()
    before = bench.states()
    for request, field in MALFORMED:
        for how, action in (
            ("Device.allocate", lambda r=request: bench.allocate_on(device, r)),
            ("allocate(devices)", lambda r=request: bench.allocate_many(bench.devices, r)),
        ):
            try:
                handle = action()  # type: ignore[no-untyped-call]
            except InvalidRequest as exc:
                expect(
                    exc.field == field or exc.field.startswith(field + "."),
                    f"{how}({request!r}): InvalidRequest names field {exc.field!r}, expected {field!r}",
                )
                continue
            except Exception as exc:
                raise CheckFailed(
                    f"{how}({request!r}) raised {type(exc).__name__}: {exc}, expected InvalidRequest"
                ) from exc
            raise CheckFailed(f"{how}({request!r}) was granted: {handle.uuids}")
    after = bench.states()
    changed = {u: before[u].differences(after[u]) for u in before if before[u] != after[u]}
    expect(not changed, f"bad requests changed the devices: {changed}")
    expect(not bench.live_ids(), f"bad requests left allocations: {sorted(bench.live_ids())}")


@check("badinput.unmatchable")
def unmatchable(bench: Bench) -> None:
    device = bench.device()
    cases = [
        ("an unknown uuid", share(1, 0, uuids=["no-such-device"]), ReasonCode.CARD_UUID_MISMATCH),
        ("another vendor", share(1, 0, vendors=["no-such-vendor"]), ReasonCode.UNKNOWN_VENDOR),
        ("an unknown model", share(1, 0, models=["no-such-model"]), ReasonCode.UNKNOWN_MODEL),
    ]
    before = bench.states()
    for what, request, code in cases:
        exc = expect_refused(lambda r=request: bench.allocate_many(bench.devices, r), f"a request for {what}", device)  # type: ignore[misc]
        if code in (ReasonCode.UNKNOWN_VENDOR, ReasonCode.UNKNOWN_MODEL):  # said once, for the request
            expect(exc.codes == {code}, f"a request for {what}: reasons {exc.reasons}, expected {code}")
            continue
        for candidate in bench.healthy():
            codes = exc.reasons.get(candidate.uuid, [])
            expect(code in codes, f"a request for {what}: device {candidate.uuid} has reasons {codes}, expected {code}")
    expect(bench.states() == before and not bench.live_ids(), "refused requests changed the devices")


NOT_HANDLES: list[Any] = [42, None, {"id": "x"}, ["x"], b"x"]
"""Values that are neither a DeviceHandle nor an allocation id."""

MALFORMED_PARTS: list[tuple[dict[str, Any], str]] = [
    ({"partition": 42}, "parts.0.partition"),
    ({"uuids": "abc"}, "parts.0.uuids"),
    ({"uuids": [1]}, "parts.0.uuids.0"),
    ({"vendors": "x"}, "parts.0.vendors"),
    ({"models": [None]}, "parts.0.models.0"),
    ({"memory_mib": 1.5}, "parts.0.memory_mib"),
    ({"exclusive": "no"}, "parts.0.exclusive"),
]
"""Malformed fields of a part beyond the sizes badinput.typed-errors asks."""


def _typed(what: str, action: Callable[[], object], *, field: str | None = None) -> HamiError:
    """``action`` must raise a HamiError (an InvalidRequest naming ``field``, when given)."""
    try:
        action()
    except HamiError as exc:
        if field is not None:
            expect(isinstance(exc, InvalidRequest), f"{what}: raised {type(exc).__name__}, expected InvalidRequest")
            named = getattr(exc, "field", "")
            expect(named == field or named.startswith(f"{field}."), f"{what}: names field {named!r}, not {field!r}")
        return exc
    except Exception as exc:
        raise CheckFailed(f"{what}: raised {type(exc).__name__}: {exc}, expected a typed HamiError") from exc
    raise CheckFailed(f"{what}: accepted")


@check("badinput.every-verb")
def every_verb(bench: Bench) -> None:
    device = bench.device()
    held = bench.allocate_on(device, share(1, 0))
    before = bench.states()
    for value in NOT_HANDLES:
        _typed(f"Device.release({value!r})", partial(device.release, value), field="handle")
    for fields, field in MALFORMED_PARTS:
        request = {"parts": [{"memory_mib": 1, **fields}]}
        _typed(f"Device.allocate({request!r})", partial(bench.allocate_on, device, request), field=field)
    _typed(
        "Device.allocate({'name': 5, ...})",
        lambda: bench.allocate_on(device, {"name": 5, "parts": [{"memory_mib": 1}]}),
        field="name",
    )
    if profiles_of(device) or Capability.PARTITIONS in bench.adapter.capabilities:
        refused = _typed(
            "a request for partition 'no-such-profile'",
            lambda: bench.allocate_on(device, share(1, 0, partition="no-such-profile")),
        )
        expect(
            isinstance(refused, InvalidRequest | InsufficientResources),
            f"a request for an unknown partition profile raised {type(refused).__name__}, expected InvalidRequest "
            "or InsufficientResources (CardPartitionUnavailable)",
        )
    after = bench.states()
    changed = {u: before[u].differences(after[u]) for u in before if before[u] != after[u]}
    expect(not changed, f"bad input changed the devices: {changed}")
    expect(bench.live_ids() == {held.id}, f"bad input changed the live allocations: {sorted(bench.live_ids())}")
    bench.release(held)
