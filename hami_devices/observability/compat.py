"""The series existing dashboards read, as Prometheus recording rules over the exporter's own.

NVIDIA's DCGM exporter, HAMi's monitor and scheduler (today's ``hami_*`` names and the legacy ones most
published HAMi dashboards still query), Ascend's npu-exporter and Cambricon's mlu-exporter: each of their
series is one rule here, with the labels and units those exporters give it.  DCGM's series carry the GPU's
name as NVML reports it (``modelName="Tesla T4"``, from ``hami_device_info``'s ``product``) and
``device="nvidia0"``; HAMi's legacy series carry ``node_name`` as HAMi's documented scrape set-up adds it.

``python -m hami_devices.observability.compat`` prints the rule file shipped as ``prometheus-rules.yml``
(a test holds the two identical).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

DCGM = "NVIDIA DCGM exporter"
HAMI = "HAMi monitor and scheduler"
HAMI_LEGACY = "HAMi (legacy names)"
NVIDIA = '{vendor="nvidia"}'


@dataclass(frozen=True)
class Rule:
    theirs: str  # the series name the field's dashboards query
    source: str  # whose name it is
    expr: str  # PromQL over the exporter's series
    note: str  # units and labels, for people


Renames = Sequence[tuple[str, str, str]]  # (new label, value template over $1, the label it is made from)


def _renamed(expr: str, renames: Renames) -> str:
    for new, template, source in renames:
        expr = f'label_replace({expr}, "{new}", "{template}", "{source}", "(.*)")'
    return expr


def _with_product(expr: str) -> str:
    """The series joined to its device's ``product`` (the vendor library's name of the GPU)."""
    return f"({expr}) * on (uuid) group_left (product) hami_device_info"


_DCGM_LABELS: Renames = (
    ("gpu", "$1", "device_index"), ("UUID", "$1", "uuid"), ("device", "nvidia$1", "device_index"),
    ("modelName", "$1", "product"), ("Hostname", "$1", "node"), ("node_name", "$1", "node"),
)
_HAMI_HOST: Renames = (("device_uuid", "$1", "uuid"), ("device_type", "NVIDIA-$1", "product"))
_HAMI_CONTAINER: Renames = (("device_uuid", "$1", "uuid"),)
_LEGACY_HOST: Renames = (
    ("nodeid", "$1", "node"), ("deviceidx", "$1", "device_index"), ("deviceuuid", "$1", "uuid"),
    ("devicetype", "NVIDIA-$1", "product"), ("node_name", "$1", "node"),
)
_LEGACY_CONTAINER: Renames = (
    ("podnamespace", "$1", "namespace"), ("podname", "$1", "pod"), ("ctrname", "$1", "container"),
    ("vdeviceid", "$1", "vdevice_index"), ("deviceuuid", "$1", "uuid"), ("node_name", "$1", "node"),
    ("nodename", "$1", "node"),
)


def _dcgm(name: str, expr: str, note: str) -> Rule:
    return Rule(name, DCGM, _renamed(_with_product(expr), _DCGM_LABELS), note)


def _device(theirs: str, source: str, expr: str, renames: Renames, note: str) -> Rule:
    return Rule(theirs, source, _renamed(_with_product(expr), renames), note)


def _container(theirs: str, source: str, expr: str, renames: Renames, note: str) -> Rule:
    return Rule(theirs, source, _renamed(expr, renames), note)


_GRANTED_SHARE = "hami_allocation_memory_limit_bytes / on (uuid) group_left hami_device_memory_total_bytes"

RULES: tuple[Rule, ...] = (
    # ---- DCGM: labels gpu, UUID, device="nvidia<index>", modelName (NVML's name), Hostname, pci_bus_id
    _dcgm("DCGM_FI_DEV_FB_USED", f"hami_device_memory_used_bytes{NVIDIA} / 1048576", "MiB of framebuffer in use"),
    _dcgm("DCGM_FI_DEV_FB_FREE",
          f"(hami_device_memory_total_bytes{NVIDIA} - hami_device_memory_used_bytes{NVIDIA}) / 1048576", "MiB"),
    _dcgm("DCGM_FI_DEV_GPU_UTIL", f"hami_device_utilization_ratio{NVIDIA} * 100", "percent"),
    _dcgm("DCGM_FI_DEV_MEM_COPY_UTIL", f"hami_device_memory_bandwidth_utilization_ratio{NVIDIA} * 100",
          "percent of time memory was read or written"),
    _dcgm("DCGM_FI_DEV_GPU_TEMP", f"hami_device_temperature_celsius{NVIDIA}", "celsius"),
    _dcgm("DCGM_FI_DEV_MEMORY_TEMP", f"hami_device_memory_temperature_celsius{NVIDIA}", "celsius"),
    _dcgm("DCGM_FI_DEV_POWER_USAGE", f"hami_device_power_watts{NVIDIA}", "watts"),
    _dcgm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", f"hami_device_energy_joules_total{NVIDIA} * 1000",
          "millijoules since the driver loaded"),
    _dcgm("DCGM_FI_DEV_SM_CLOCK", f"hami_device_sm_clock_hertz{NVIDIA} / 1e6", "MHz"),
    _dcgm("DCGM_FI_DEV_MEM_CLOCK", f"hami_device_memory_clock_hertz{NVIDIA} / 1e6", "MHz"),
    _dcgm("DCGM_FI_PROF_PCIE_TX_BYTES", f"hami_device_pcie_transmit_bytes_per_second{NVIDIA}", "bytes/s"),
    _dcgm("DCGM_FI_PROF_PCIE_RX_BYTES", f"hami_device_pcie_receive_bytes_per_second{NVIDIA}", "bytes/s"),
    _dcgm("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", f"hami_device_ecc_corrected_errors_total{NVIDIA}", "errors"),
    _dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", f"hami_device_ecc_uncorrected_errors_total{NVIDIA}", "errors"),
    _dcgm("DCGM_FI_DEV_XID_ERRORS", f"hami_device_last_xid{NVIDIA}", "the last XID error's code"),
    _dcgm("DCGM_FI_DEV_RETIRED_SBE", f"hami_device_retired_single_bit_pages{NVIDIA}", "pages"),
    _dcgm("DCGM_FI_DEV_RETIRED_DBE", f"hami_device_retired_double_bit_pages{NVIDIA}", "pages"),
    _dcgm("DCGM_FI_DEV_RETIRED_PENDING", f"hami_device_page_retirement_pending{NVIDIA}", "0 or 1"),
    _dcgm("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", f"hami_device_correctable_remapped_rows{NVIDIA}", "rows"),
    _dcgm("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", f"hami_device_uncorrectable_remapped_rows{NVIDIA}", "rows"),
    _dcgm("DCGM_FI_DEV_ROW_REMAP_PENDING", f"hami_device_row_remap_pending{NVIDIA}", "0 or 1"),
    _dcgm("DCGM_FI_DEV_ROW_REMAP_FAILURE", f"hami_device_row_remap_failed{NVIDIA}", "0 or 1"),
    _dcgm("DCGM_FI_DEV_ENC_UTIL", f"hami_device_encoder_utilization_ratio{NVIDIA} * 100", "percent"),
    _dcgm("DCGM_FI_DEV_DEC_UTIL", f"hami_device_decoder_utilization_ratio{NVIDIA} * 100", "percent"),
    _dcgm("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", f"hami_device_tensor_active_ratio{NVIDIA}", "0..1"),
    # ---- HAMi, today's names: host (node, device_index, device_uuid, device_type) and per container
    _device("hami_host_gpu_memory_used_bytes", HAMI, f"hami_device_memory_used_bytes{NVIDIA}", _HAMI_HOST,
            "bytes, the whole GPU"),
    _device("hami_host_gpu_utilization_ratio", HAMI, f"hami_device_utilization_ratio{NVIDIA} * 100", _HAMI_HOST,
            "percent (0..100, as HAMi reports it)"),
    _device("hami_gpu_memory_limit_bytes", HAMI, f"hami_device_memory_total_bytes{NVIDIA}", _HAMI_HOST, "bytes"),
    _device("hami_gpu_memory_allocated_bytes", HAMI, f"hami_device_memory_granted_bytes{NVIDIA}", _HAMI_HOST,
            "bytes granted to shares"),
    _device("hami_gpu_shared_count", HAMI, f"hami_device_sharers{NVIDIA}", _HAMI_HOST, "shares on the GPU"),
    _device("hami_gpu_core_allocated_ratio", HAMI, f"hami_device_cores_granted_ratio{NVIDIA} * 100", _HAMI_HOST,
            "percent of the GPU's compute granted"),
    _device("hami_node_gpu_memory_allocated_ratio", HAMI,
            f"hami_device_memory_granted_bytes{NVIDIA} / hami_device_memory_total_bytes{NVIDIA}", _HAMI_HOST, "0..1"),
    _container("hami_vgpu_memory_used_bytes", HAMI, "hami_allocation_memory_used_bytes", _HAMI_CONTAINER,
               "bytes held by one share; namespace, pod, container, vdevice_index, device_uuid"),
    _container("hami_vgpu_memory_limit_bytes", HAMI, "hami_allocation_memory_limit_bytes", _HAMI_CONTAINER,
               "bytes granted to one share"),
    _container("hami_container_device_utilization_ratio", HAMI, "hami_allocation_utilization_ratio * 100",
               _HAMI_CONTAINER, "percent (0..100, as HAMi reports it), only where the limiter measured it"),
    # ---- HAMi, legacy names (what most published HAMi dashboards query)
    _device("HostGPUMemoryUsage", HAMI_LEGACY, f"hami_device_memory_used_bytes{NVIDIA}", _LEGACY_HOST,
            "bytes; nodeid, deviceidx, deviceuuid, devicetype"),
    _device("HostCoreUtilization", HAMI_LEGACY, f"hami_device_utilization_ratio{NVIDIA} * 100", _LEGACY_HOST,
            "percent"),
    _device("GPUDeviceMemoryLimit", HAMI_LEGACY, f"hami_device_memory_total_bytes{NVIDIA}", _LEGACY_HOST, "bytes"),
    _device("GPUDeviceMemoryAllocated", HAMI_LEGACY, f"hami_device_memory_granted_bytes{NVIDIA}", _LEGACY_HOST,
            "bytes"),
    _device("GPUDeviceSharedNum", HAMI_LEGACY, f"hami_device_sharers{NVIDIA}", _LEGACY_HOST, "shares"),
    _device("GPUDeviceCoreAllocated", HAMI_LEGACY, f"hami_device_cores_granted_ratio{NVIDIA} * 100",
            _LEGACY_HOST, "percent"),
    _device("nodeGPUOverview", HAMI_LEGACY, f"hami_device_memory_granted_bytes{NVIDIA}", _LEGACY_HOST,
            "bytes granted; without HAMi's value-as-label columns"),
    _container("vGPU_device_memory_usage_in_bytes", HAMI_LEGACY, "hami_allocation_memory_used_bytes",
               _LEGACY_CONTAINER, "bytes; podnamespace, podname, ctrname, vdeviceid, deviceuuid"),
    _container("vGPU_device_memory_limit_in_bytes", HAMI_LEGACY, "hami_allocation_memory_limit_bytes",
               _LEGACY_CONTAINER, "bytes"),
    _container("Device_memory_desc_of_container", HAMI_LEGACY, "hami_allocation_memory_used_bytes",
               _LEGACY_CONTAINER, "bytes held (HAMi's context/module/data split is not known here)"),
    _container("Device_utilization_desc_of_container", HAMI_LEGACY, "hami_allocation_utilization_ratio * 100",
               _LEGACY_CONTAINER, "percent, where the limiter measured it"),
    _container("vGPUCorePercentage", HAMI_LEGACY, "hami_allocation_cores_limit_ratio * 100", _LEGACY_CONTAINER,
               "percent of the GPU's compute granted to the share"),
    _container("vGPUMemoryPercentage", HAMI_LEGACY, _GRANTED_SHARE, _LEGACY_CONTAINER,
               "share of the GPU's memory granted, 0..1"),
    # ---- Ascend and Cambricon
    _container("container_npu_used_memory", "Ascend npu-exporter",
               'hami_allocation_memory_used_bytes{vendor="ascend"} / 1048576',
               (("id", "$1", "device_index"), ("vdie_id", "$1", "uuid"), ("pcie_bus_info", "$1", "pci_bus_id"),
                ("model_name", "$1", "model"), ("pod_name", "$1", "pod"), ("container_name", "$1", "container")),
               "MB per share; id, vdie_id, pcie_bus_info, model_name, pod_name, container_name, namespace"),
    _container("mlu_container", "Cambricon mlu-exporter", 'hami_allocation_info{vendor="cambricon"}',
               (("nodeName", "$1", "node"),),
               "join metric: multiply a device metric by it on(uuid) to attribute it to pod/container"),
)


def rules_yaml() -> str:
    """The recording-rule file (``prometheus-rules.yml``)."""
    body = {"groups": [{"name": "hami-devices-compat", "rules": [{"record": r.theirs, "expr": r.expr}
                                                                 for r in RULES]}]}
    head = (
        "# Generated by `python -m hami_devices.observability.compat`: do not edit (see compat.py).\n"
        "# Recording rules that give the hami-devices exporter's series the names existing dashboards and alerts\n"
        "# use: NVIDIA's DCGM exporter, HAMi's monitor and scheduler (today's and the legacy names), Ascend's\n"
        "# npu-exporter and Cambricon's mlu-exporter.  Load with Prometheus' rule_files.\n"
    )
    return head + yaml.safe_dump(body, sort_keys=False, width=100_000)


if __name__ == "__main__":
    sys.stdout.write(rules_yaml())
