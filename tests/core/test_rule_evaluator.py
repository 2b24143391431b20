"""The rule table's scalar evaluator on one device (what ``hd.allocate`` re-checks each grant with), asked
directly: the selectors of a part against the device's own names."""

from __future__ import annotations

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import ReasonCode
from hami_devices.models import DeviceInfo, Grant, RequestPart
from hami_devices.rounding import DefaultRule
from hami_devices.rules import evaluate

T4 = DeviceInfo(uuid="GPU-t4", index=0, vendor="nvidia", model="T4", node="n0", memory_mib=15_360)


def _judge(**part: object) -> Grant | list[ReasonCode]:
    return evaluate(T4, DefaultRule(), RequestPart.model_validate({"memory_mib": 1_024, **part}), 0, DeviceUsage())


def test_a_uuid_selector_takes_only_the_device_it_names() -> None:
    assert isinstance(_judge(uuids=["GPU-t4"]), Grant)
    assert _judge(uuids=["GPU-other"]) == [ReasonCode.CARD_UUID_MISMATCH]


def test_a_vendor_selector_is_case_blind_and_excludes_what_it_names() -> None:
    assert isinstance(_judge(vendors=["NVIDIA"]), Grant)
    assert _judge(vendors=["ascend"]) == [ReasonCode.CARD_VENDOR_MISMATCH]
    assert _judge(exclude_vendors=["Nvidia"]) == [ReasonCode.CARD_VENDOR_MISMATCH]
    assert isinstance(_judge(exclude_vendors=["ascend"]), Grant)


def test_a_model_selector_reads_the_models_names() -> None:
    assert isinstance(_judge(models=["t4"]), Grant)
    assert _judge(models=["A100"]) == [ReasonCode.CARD_TYPE_MISMATCH]
    assert _judge(exclude_models=["T4"]) == [ReasonCode.CARD_TYPE_MISMATCH]


def test_every_reason_is_given_at_once() -> None:
    assert set(_judge(vendors=["ascend"], uuids=["GPU-other"])) == {  # type: ignore[arg-type]
        ReasonCode.CARD_VENDOR_MISMATCH,
        ReasonCode.CARD_UUID_MISMATCH,
    }


def test_what_is_left_decides_memory_and_cores() -> None:
    used = DeviceUsage().plus(Grant.on(T4, 0, 15_000, 90))
    judged = evaluate(T4, DefaultRule(), RequestPart(memory_mib=360, cores=10), 0, used)
    assert isinstance(judged, Grant) and (judged.memory_mib, judged.cores) == (360, 10)
    assert evaluate(T4, DefaultRule(), RequestPart(memory_mib=361, cores=10), 0, used) == [
        ReasonCode.CARD_INSUFFICIENT_MEMORY
    ]
    assert evaluate(T4, DefaultRule(), RequestPart(memory_mib=360, cores=11), 0, used) == [
        ReasonCode.CARD_INSUFFICIENT_CORE
    ]
