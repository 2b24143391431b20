"""CEL selectors in the Kubernetes DRA environment, on real published devices."""

from __future__ import annotations

from typing import Any

import pytest

from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.kubernetes.dra.cel import SelectorError

from .conftest import claim, exactly


def _select(allocator: DraAllocator, expression: str) -> list[str]:
    env = allocator.catalog.env
    rows = env.select(expression, range(len(allocator.catalog.devices)), "ns/c", "r")
    return [allocator.catalog.devices[i].name for i in rows]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.driver == "hami-devices.io" && device.attributes["hami-devices.io"].model == "T4"', 3),
        ('device.attributes["hami-devices.io"].vendor == "nvidia" && device.allowMultipleAllocations && '
         'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")', 2),
        ('device.capacity["hami-devices.io"].memory.compareTo(quantity("64Gi")) >= 0 '
         '&& device.attributes["hami-devices.io"].kind == "device"', 6),
        ('device.capacity["hami-devices.io"].memory.isGreaterThan(quantity("30Gi")) && device.allowMultipleAllocations',
         12),
        ('"cudaComputeCapability" in device.attributes["gpu.nvidia.com"] && '
         'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isLessThan(semver("8.0.0")) '
         '&& device.allowMultipleAllocations', 3),
        ('"computeCapability" in device.attributes["hami-devices.io"] && device.allowMultipleAllocations && '
         'device.attributes["hami-devices.io"].computeCapability == semver("9.0.0")', 2),
        ('device.attributes["hami-devices.io"].vendor.upperAscii() == "CAMBRICON" && device.allowMultipleAllocations',
         2),
        ('quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi") && device.attributes["hami-devices.io"].index == 0 '
         '&& device.allowMultipleAllocations && semver("1.2.3").major() == 1', 5),
    ],
)
def test_dra_environment(allocator: DraAllocator, expression: str, expected: int) -> None:
    assert len(_select(allocator, expression)) == expected


def test_a_bad_expression_names_claim_and_request(allocator: DraAllocator) -> None:
    bad = claim("typo", [exactly("first", selectors=('device.attributes["hami-devices.io"].model ==',))])
    with pytest.raises(SelectorError) as info:
        allocator.allocate(bad)
    assert info.value.claim == "default/typo" and info.value.request == "first"
    assert "default/typo" in str(info.value) and "first" in str(info.value) and "compile" in str(info.value)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('device.attributes["hami-devices.io"].noSuchAttribute == "x"', "evaluation failed"),
        ('device.attributes["hami-devices.io"].model', "not a boolean"),
        ('quantity("1Gi").compareTo(semver("1.0.0")) == 0', "evaluation failed"),
    ],
)
def test_runtime_errors_abort_the_allocation(allocator: DraAllocator, expression: str, message: str) -> None:
    bad = claim("bad", [exactly("r", selectors=(expression,))])
    with pytest.raises(SelectorError, match=message):
        allocator.allocate(bad)
    assert not allocator.engine.cluster.bookings


def test_results_are_cached_per_expression(allocator: DraAllocator) -> None:
    expression = 'device.attributes["hami-devices.io"].model == "A30"'
    first = _select(allocator, expression)
    env: Any = allocator.catalog.env
    assert len(env._results[expression]) == len(allocator.catalog.devices)
    assert _select(allocator, expression) == first
