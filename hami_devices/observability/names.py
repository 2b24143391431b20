"""The exporter's metric names and their labels (``compat`` maps them onto DCGM's, HAMi's, Ascend's and
Cambricon's).

Names follow Prometheus conventions: base units (bytes, seconds, ratios 0..1,
watts, celsius), ``_total`` for counters, ``_info`` for join metrics whose value
is 1.  ``SERVED`` is the complete list: the dashboard and the recording rules
shipped beside this module are checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_devices.models import fields

DEVICE_LABELS = ("node", "vendor", "model", "uuid", "device_index", "pci_bus_id")
"""Every per-device and per-allocation series carries these: ``uuid`` joins to any vendor exporter."""

METADATA_LABELS = ("workload", "namespace", "pod", "container", "queue", "owner")
"""The allocation metadata keys that become labels (other keys stay in the ledger and events only,
so that a caller's free-form metadata cannot explode the series count)."""

ALLOCATION_LABELS = (*DEVICE_LABELS, "allocation_id", *METADATA_LABELS, "vdevice_index")
"""``vdevice_index``: the device's position among the workload's visible devices of its vendor (what its
runtime calls device 0, 1 ...), as HAMi's per-container series number it."""


@dataclass(frozen=True)
class MetricName:
    name: str
    kind: str  # gauge | counter | info
    help: str
    labels: tuple[str, ...]


def _m(name: str, kind: str, help_text: str, labels: tuple[str, ...]) -> MetricName:
    return MetricName(name, kind, help_text, labels)


DEVICE_INFO = _m(
    "hami_device_info", "info", "Static facts of a device (value 1); product: the vendor library's name of it.",
    (*DEVICE_LABELS, "numa_node", "product"),
)
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




def _field(name: str, kind: str, help_text: str) -> MetricName:
    return _m(name, kind, help_text, DEVICE_LABELS)


FIELD_METRICS: dict[str, tuple[MetricName, float]] = {
    fields.SM_CLOCK_MHZ: (_field("hami_device_sm_clock_hertz", "gauge", "Compute (SM) clock."), 1e6),
    fields.MEMORY_CLOCK_MHZ: (_field("hami_device_memory_clock_hertz", "gauge", "Memory clock."), 1e6),
    fields.MEMORY_UTILIZATION_PCT: (_field(
        "hami_device_memory_bandwidth_utilization_ratio", "gauge",
        "Share of time device memory was being read or written, 0..1."), 0.01),
    fields.PCIE_TX_BYTES_PER_S: (_field(
        "hami_device_pcie_transmit_bytes_per_second", "gauge", "PCIe bytes sent by the device."), 1.0),
    fields.PCIE_RX_BYTES_PER_S: (_field(
        "hami_device_pcie_receive_bytes_per_second", "gauge", "PCIe bytes received by the device."), 1.0),
    fields.ECC_CORRECTED_ERRORS: (_field(
        "hami_device_ecc_corrected_errors_total", "counter", "Corrected (single-bit) ECC errors."), 1.0),
    fields.ECC_UNCORRECTED_ERRORS: (_field(
        "hami_device_ecc_uncorrected_errors_total", "counter", "Uncorrected (double-bit) ECC errors."), 1.0),
    fields.XID_ERRORS: (_field(
        "hami_device_xid_errors_total", "counter", "XID errors (critical driver events) seen."), 1.0),
    fields.LAST_XID: (_field("hami_device_last_xid", "gauge", "The code of the last XID error seen."), 1.0),
    fields.RETIRED_PAGES_SINGLE_BIT: (_field(
        "hami_device_retired_single_bit_pages", "gauge", "Pages retired for repeated corrected errors."), 1.0),
    fields.RETIRED_PAGES_DOUBLE_BIT: (_field(
        "hami_device_retired_double_bit_pages", "gauge", "Pages retired for an uncorrected error."), 1.0),
    fields.RETIRED_PAGES_PENDING: (_field(
        "hami_device_page_retirement_pending", "gauge", "1 while a page retirement waits for a reload."), 1.0),
    fields.REMAPPED_ROWS_CORRECTABLE: (_field(
        "hami_device_correctable_remapped_rows", "gauge", "Memory rows remapped for corrected errors."), 1.0),
    fields.REMAPPED_ROWS_UNCORRECTABLE: (_field(
        "hami_device_uncorrectable_remapped_rows", "gauge", "Memory rows remapped for uncorrected errors."), 1.0),
    fields.ROW_REMAP_PENDING: (_field(
        "hami_device_row_remap_pending", "gauge", "1 while a row remap waits for a reset."), 1.0),
    fields.ROW_REMAP_FAILED: (_field("hami_device_row_remap_failed", "gauge", "1 when a row remap failed."), 1.0),
    fields.ENERGY_JOULES: (_field(
        "hami_device_energy_joules_total", "counter", "Energy used since the driver loaded."), 1.0),
    fields.MEMORY_TEMPERATURE_C: (_field(
        "hami_device_memory_temperature_celsius", "gauge", "Device memory temperature."), 1.0),
    fields.ENCODER_UTILIZATION_PCT: (_field(
        "hami_device_encoder_utilization_ratio", "gauge", "Video encoder utilization, 0..1."), 0.01),
    fields.DECODER_UTILIZATION_PCT: (_field(
        "hami_device_decoder_utilization_ratio", "gauge", "Video decoder utilization, 0..1."), 0.01),
    fields.TENSOR_ACTIVE_PCT: (_field(
        "hami_device_tensor_active_ratio", "gauge", "Share of time any tensor pipe was busy, 0..1."), 0.01),
}
"""Each extra device field (``hami_devices.models.fields``) -> its metric and the factor to base units."""

ALLOCATION_INFO = _m(
    "hami_allocation_info", "info", "One allocation's grant on one device, with its workload identity (value 1).",
    (*ALLOCATION_LABELS, "partition", "exclusive", "core_policy"),
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
    "hami_limiter_refusals_total", "counter",
    "Calls the limiter refused: allocations over the memory limit (kind=memory), launches the pacer held back "
    "past its burst (kind=compute); counted in the regions, recorded as limiter.refused events.",
    ("uuid", "kind"),
)
EVENTS = _m("hami_lifecycle_events_total", "counter", "Lifecycle events recorded, by kind.", ("kind",))

COLLECTOR_UP = _m(
    "hami_exporter_collector_up", "gauge",
    "1 when the collector (a vendor library, the limiter regions, the ledger) answered in time.", ("collector",),
)
COLLECTOR_ERROR = _m(
    "hami_exporter_collector_error_info", "info",
    "Why a collector is down (value 1, only while it is): a vendor library that cannot be loaded, a timeout, an "
    "error.", ("collector", "error"),
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
    DEVICE_HEALTHY, *(metric for metric, _ in FIELD_METRICS.values()),
    DEVICE_SHARERS, DEVICE_MEMORY_GRANTED, DEVICE_CORES_GRANTED,
    ALLOCATION_INFO, ALLOCATION_MEMORY_LIMIT, ALLOCATION_CORES_LIMIT, ALLOCATION_MEMORY_USED,
    ALLOCATION_MEMORY_PEAK, ALLOCATION_MEMORY_SPILLED, ALLOCATION_UTILIZATION, ALLOCATION_PROCESSES,
    GRANTED, RELEASED, EVICTIONS, REFUSALS, LIMITER_REFUSALS, EVENTS,
    COLLECTOR_UP, COLLECTOR_ERROR, COLLECTOR_SECONDS, SNAPSHOT_TIMESTAMP,
)


def sample_names() -> set[str]:
    """Every series name a scrape can contain (counters as ``_total``, plus ``_created`` is not served)."""
    return {m.name for m in SERVED}
