"""Request validation names the field; every model round-trips through JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hami_devices import NOT_AVAILABLE, DeviceHandle, InvalidRequest, Metrics, ResourceRequest
from hami_devices.models import Grant, Health, RequestPart


@pytest.mark.parametrize(
    ("part", "field"),
    [
        ({"count": 0}, "parts.0.count"),
        ({"memory_mib": -5}, "parts.0.memory_mib"),
        ({"memory_percent": 150}, "parts.0.memory_percent"),
        ({"cores": 101}, "parts.0.cores"),
        ({"cores": -1}, "parts.0.cores"),
        ({"colour": "blue"}, "parts.0.colour"),
        ({"precision": "fp64"}, "parts.0.precision"),
    ],
)
def test_invalid_part_names_the_field(part: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        ResourceRequest.model_validate({"parts": [part]})
    assert info.value.field == field
    assert field in str(info.value)


def test_both_memory_forms_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="memory_mib or memory_percent"):
        RequestPart(memory_mib=10, memory_percent=10)


def test_request_needs_a_part_and_a_known_task_type() -> None:
    with pytest.raises(InvalidRequest) as info:
        ResourceRequest(parts=[])
    assert info.value.field == "parts"
    with pytest.raises(InvalidRequest) as info:
        ResourceRequest.model_validate({"task_type": "gaming", "parts": [{}]})
    assert info.value.field == "task_type"


def test_unknown_top_level_field_is_refused_by_name() -> None:
    with pytest.raises(InvalidRequest) as info:
        ResourceRequest.model_validate_json('{"parts": [{}], "gpus": 3}')
    assert info.value.field == "gpus"


def test_handle_round_trips_through_json() -> None:
    request = ResourceRequest(task_type="inference", parts=[RequestPart(count=2, memory_mib=1024, cores=30)])
    grant = Grant(uuid="GPU-1", node="n", vendor="nvidia", model="T4", index=0, part=0, memory_mib=1024, cores=30)
    handle = DeviceHandle(request=request, grants=[grant], env={"CUDA_VISIBLE_DEVICES": "GPU-1"})
    again = DeviceHandle.model_validate_json(handle.model_dump_json())
    assert again == handle
    assert json.loads(again.model_dump_json())["grants"][0]["uuid"] == "GPU-1"


def test_metrics_keep_not_available_distinct_from_zero() -> None:
    metrics = Metrics(
        uuid="x", vendor="v", model="m", health=Health.HEALTHY, memory_total_mib=10,
        memory_used_mib=0, utilization_pct=NOT_AVAILABLE, temperature_c=NOT_AVAILABLE, power_w=12.5,
    )
    again = Metrics.model_validate_json(metrics.model_dump_json())
    assert again.memory_used_mib == 0
    assert again.utilization_pct == NOT_AVAILABLE
    assert again.power_w == 12.5


def test_memory_percent_resolves_against_the_device() -> None:
    assert RequestPart(memory_percent=25).memory_for(16_000) == 4_000
    assert RequestPart().memory_for(16_000) == 16_000
    assert RequestPart(memory_mib=3).memory_for(16_000) == 3
