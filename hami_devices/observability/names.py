"""The exporter's metric names, their labels, and how they map onto DCGM's, HAMi's, Ascend's and Cambricon's.

Names follow Prometheus conventions: base units (bytes, seconds, ratios 0..1,
watts, celsius), ``_total`` for counters, ``_info`` for join metrics whose value
is 1.  ``SERVED`` is the complete list: the dashboard and the recording rules
shipped beside this module are checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass

DEVICE_LABELS = ("node", "vendor", "model", "uuid", "device_index", "pci_bus_id")
"""Every per-device and per-allocation series carries these: ``uuid`` joins to any vendor exporter."""

METADATA_LABELS = ("workload", "namespace", "pod", "container", "queue", "owner")
"""The allocation metadata keys that become labels (other keys stay in the ledger and events only,
so that a caller's free-form metadata cannot explode the series count)."""

ALLOCATION_LABELS = (*DEVICE_LABELS, "allocation_id", *METADATA_LABELS)


@dataclass(frozen=True)
class MetricName:
    name: str
    kind: str  # gauge | counter | info
    help: str
    labels: tuple[str, ...]


def _m(name: str, kind: str, help_text: str, labels: tuple[str, ...]) -> MetricName:
    return MetricName(name, kind, help_text, labels)


DEVICE_INFO = _m("hami_device_info", "info", "Static facts of a device (value 1).", (*DEVICE_LABELS, "numa_node"))
DEVICE_MEMORY_TOTAL = _m("hami_device_memory_total_bytes", "gauge", "Device memory.", DEVICE_LABELS)
DEVICE_MEMORY_USED = _m(
    "hami_device_memory_used_bytes", "gauge", "Device memory in use (vendor library).", DEVICE_LABELS
)
DEVICE_UTILIZATION = _m("hami_device_utilization_ratio", "gauge", "Device compute utilization, 0..1.", DEVICE_LABELS)
DEVICE_TEMPERATURE = _m("hami_device_temperature_celsius", "gauge", "Device temperature.", DEVICE_LABELS)
DEVICE_POWER = _m("hami_device_power_watts", "gauge", "Device power draw.", DEVICE_LABELS)
DEVICE_HEALTHY = _m("hami_device_healthy", "gauge", "1 when the device is healthy, 0 when not.", DEVICE_LABELS)
DEVICE_SHARERS = _m("hami_device_sharers", "gauge", "Allocations holding a share of the device.", DEVICE_LABELS)
DEVICE_MEMORY_GRANTED = _m(
    "hami_device_memory_granted_bytes", "gauge", "Memory granted to allocations on the device.", DEVICE_LABELS
)
DEVICE_CORES_GRANTED = _m(
    "hami_device_cores_granted_ratio", "gauge", "Compute granted to allocations, as a share of the device.",
    DEVICE_LABELS,
)

ALLOCATION_INFO = _m(
    "hami_allocation_info", "info", "One allocation's grant on one device, with its workload identity (value 1).",
    (*ALLOCATION_LABELS, "partition", "exclusive"),
)
ALLOCATION_MEMORY_LIMIT = _m(
    "hami_allocation_memory_limit_bytes", "gauge", "Memory granted (the limiter's limit).", ALLOCATION_LABELS
)
ALLOCATION_CORES_LIMIT = _m(
    "hami_allocation_cores_limit_ratio", "gauge", "Compute granted, as a share of the device (1 = exclusive).",
    ALLOCATION_LABELS,
)
ALLOCATION_MEMORY_USED = _m(
    "hami_allocation_memory_used_bytes", "gauge", "Memory the allocation's processes hold (limiter region).",
    ALLOCATION_LABELS,
)
ALLOCATION_MEMORY_PEAK = _m(
    "hami_allocation_memory_peak_bytes", "gauge", "High-water mark of the memory held (limiter region).",
    ALLOCATION_LABELS,
)
ALLOCATION_MEMORY_SPILLED = _m(
    "hami_allocation_memory_spilled_bytes", "gauge",
    "Of the memory held, what the card could not hold and host memory serves (virtual device memory).",
    ALLOCATION_LABELS,
)
ALLOCATION_UTILIZATION = _m(
    "hami_allocation_utilization_ratio", "gauge",
    "Device compute used by the allocation's processes, 0..1, where the limiter measured it.", ALLOCATION_LABELS,
)
ALLOCATION_PROCESSES = _m(
    "hami_allocation_processes", "gauge", "Live workload processes registered in the region.", ALLOCATION_LABELS
)

GRANTED = _m("hami_allocations_granted_total", "counter", "Allocations granted (event log).", ())
RELEASED = _m("hami_allocations_released_total", "counter", "Allocations released (event log).", ())
EVICTIONS = _m("hami_allocation_evictions_total", "counter", "Allocations evicted, by reclaimer.", ("reclaimer",))
REFUSALS = _m(
    "hami_allocation_refusals_total", "counter", "Refused requests, once per reason code they carried.", ("reason",)
)
LIMITER_REFUSALS = _m(
    "hami_limiter_refusals_total", "counter", "Limiter calls refused over quota (recorded bursts).", ("uuid",)
)
EVENTS = _m("hami_lifecycle_events_total", "counter", "Lifecycle events recorded, by kind.", ("kind",))

COLLECTOR_UP = _m(
    "hami_exporter_collector_up", "gauge",
    "1 when the collector (a vendor library, the limiter regions, the ledger) answered in time.", ("collector",),
)
COLLECTOR_SECONDS = _m(
    "hami_exporter_collector_duration_seconds", "gauge", "How long the collector took (or has been running).",
    ("collector",),
)
SNAPSHOT_TIMESTAMP = _m(
    "hami_exporter_snapshot_timestamp_seconds", "gauge",
    "Unix time the served readings were taken; time() minus it is how stale they are.", (),
)

SERVED: tuple[MetricName, ...] = (
    DEVICE_INFO, DEVICE_MEMORY_TOTAL, DEVICE_MEMORY_USED, DEVICE_UTILIZATION, DEVICE_TEMPERATURE, DEVICE_POWER,
    DEVICE_HEALTHY, DEVICE_SHARERS, DEVICE_MEMORY_GRANTED, DEVICE_CORES_GRANTED,
    ALLOCATION_INFO, ALLOCATION_MEMORY_LIMIT, ALLOCATION_CORES_LIMIT, ALLOCATION_MEMORY_USED,
    ALLOCATION_MEMORY_PEAK, ALLOCATION_MEMORY_SPILLED, ALLOCATION_UTILIZATION, ALLOCATION_PROCESSES,
    GRANTED, RELEASED, EVICTIONS, REFUSALS, LIMITER_REFUSALS, EVENTS,
    COLLECTOR_UP, COLLECTOR_SECONDS, SNAPSHOT_TIMESTAMP,
)


def sample_names() -> set[str]:
    """Every series name a scrape can contain (counters as ``_total``, plus ``_created`` is not served)."""
    return {m.name for m in SERVED}


@dataclass(frozen=True)
class Equivalent:
    """How a field exporter's metric is computed from ours (documentation, and the recording rules)."""

    theirs: str
    source: str
    ours: str
    note: str


EQUIVALENTS: tuple[Equivalent, ...] = (
    Equivalent("DCGM_FI_DEV_FB_USED", "NVIDIA DCGM exporter", "hami_device_memory_used_bytes / 2^20",
               "MiB; labels gpu=device_index, UUID=uuid, pci_bus_id, modelName=model, Hostname=node"),
    Equivalent("DCGM_FI_DEV_FB_FREE", "NVIDIA DCGM exporter",
               "(hami_device_memory_total_bytes - hami_device_memory_used_bytes) / 2^20", "MiB"),
    Equivalent("DCGM_FI_DEV_GPU_UTIL", "NVIDIA DCGM exporter", "hami_device_utilization_ratio * 100", "percent"),
    Equivalent("DCGM_FI_DEV_GPU_TEMP", "NVIDIA DCGM exporter", "hami_device_temperature_celsius", "celsius"),
    Equivalent("DCGM_FI_DEV_POWER_USAGE", "NVIDIA DCGM exporter", "hami_device_power_watts", "watts"),
    Equivalent("hami_vgpu_memory_used_bytes", "HAMi monitor", "hami_allocation_memory_used_bytes",
               "per share, not per whole GPU; device_uuid=uuid, pod, container, namespace"),
    Equivalent("hami_vgpu_memory_limit_bytes", "HAMi monitor", "hami_allocation_memory_limit_bytes", "bytes"),
    Equivalent("hami_container_device_utilization_ratio", "HAMi monitor", "hami_allocation_utilization_ratio",
               "0..1, only where the limiter measured it"),
    Equivalent("container_npu_used_memory", "Ascend npu-exporter", "hami_allocation_memory_used_bytes / 2^20",
               "MB; labels id=device_index, vdie_id=uuid, pcie_bus_info=pci_bus_id, model_name=model, "
               "pod_name=pod, container_name=container, namespace"),
    Equivalent("mlu_container", "Cambricon mlu-exporter", "hami_allocation_info",
               "join metric: multiply a device metric by it on(uuid) to attribute it to pod/container"),
)
