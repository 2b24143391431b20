"""Allocation on discovered GPUs: NVLink pairs, and MIG instances created/destroyed through NVML."""

from __future__ import annotations

from pathlib import Path

from nvidia_helpers import FIXTURES, scenario

A30_EXISTING = {"MIG-a30a30a3-0000-4000-8000-000001000001", "MIG-a30a30a3-0000-4000-8000-000002000002"}


def test_two_gpu_task_on_h100_node_goes_to_an_nvlink_pair() -> None:
    result = scenario("pair", "required", "h100-nvlink.conf")
    assert result["first"] == [0, 3]  # first fit would take 0 and 1, which share only a PCIe switch
    assert result["second"] == [1, 2]
    visible = result["env"]["CUDA_VISIBLE_DEVICES"].split(",")
    assert visible == ["GPU-7f3a9c2e-1b4d-4e8a-9c6f-000000000000", "GPU-7f3a9c2e-1b4d-4e8a-9c6f-000000000003"]


def test_flexible_mode_creates_the_smallest_instance_at_a_free_placement_and_destroys_it() -> None:
    steps = scenario("mig", "flexible", "a30-mig.conf")["steps"]
    created = steps[0]
    assert created["partition"] == "1g.6gb" and created["cores"] == 25 and created["memory_mib"] == 5952
    assert created["partition_uuid"].startswith("MIG-") and created["partition_uuid"] not in A30_EXISTING
    assert created["visible"] == created["partition_uuid"]  # CUDA_VISIBLE_DEVICES names the MIG device
    assert [(i["profile"], i["start"]) for i in created["instances"]] == [
        ("2g.12gb", 0), ("1g.6gb", 2), ("1g.6gb", 3)
    ]
    assert steps[1]["codes"] == ["CardPartitionUnavailable", "NodeInsufficientDevices"]  # no slice left
    assert steps[2]["codes"] == ["CardPartitionUnavailable", "NodeInsufficientDevices"]
    assert steps[3]["released"] == created["partition_uuid"]
    assert {i["uuid"] for i in steps[3]["instances"]} == A30_EXISTING  # destroyed on release
    assert steps[4]["error"] == "InsufficientResources"  # 2g.12gb has no valid placement left


def test_strict_mode_hands_out_existing_instances_only() -> None:
    steps = scenario("mig", "strict", "a30-mig.conf")["steps"]
    assert steps[0]["partition"] == "1g.6gb"
    assert steps[0]["partition_uuid"] == "MIG-a30a30a3-0000-4000-8000-000002000002"
    assert steps[1]["partition"] == "2g.12gb"  # the smallest existing instance that fits is now the 2g
    assert steps[1]["partition_uuid"] == "MIG-a30a30a3-0000-4000-8000-000001000001"
    assert steps[2]["error"] == "InsufficientResources"  # plain shares cannot use a MIG GPU
    assert {i["uuid"] for i in steps[3]["instances"]} == A30_EXISTING  # strict never destroys


def test_disabled_mode_uses_no_mig() -> None:
    steps = scenario("mig", "disabled", "a30-mig.conf")["steps"]
    assert all(s.get("codes") == ["CardPartitionUnavailable", "NodeInsufficientDevices"] for s in steps)


def test_driver_refusal_is_a_clear_vendor_error(tmp_path: Path) -> None:
    text = (FIXTURES / "a30-mig.conf").read_text().replace("mig = enabled", "mig = enabled\nmig_refuse = 4", 1)
    fixture = tmp_path / "a30-refuse.conf"
    fixture.write_text(text)
    steps = scenario("mig", "flexible", fixture)["steps"]
    refused = steps[0]
    assert refused["error"] == "NvmlError" and refused["code"] == 4  # NVML_ERROR_NO_PERMISSION
    assert refused["function"] == "nvmlDeviceCreateGpuInstanceWithPlacement"
    assert "refused to create MIG instance 1g.6gb" in refused["message"]
