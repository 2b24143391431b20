"""What NVML reports of a GPU besides memory, utilization, temperature and power: clocks, PCIe throughput,
ECC errors, retired pages and remapped rows, energy, memory temperature, codec utilization, XID events and
tensor activity (GPU performance monitoring), as the keys of ``hami_devices.models.fields``.

A query the driver cannot answer for this GPU leaves its key out.  XID errors arrive as events: each device
keeps an event set and drains it on every read.  Tensor activity is measured between two GPM samples: the
first read takes one, each later read reports the interval since the previous one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import pynvml

from hami_devices.models import MetricValue
from hami_devices.models import fields as f
from hami_nvidia.binding import NvmlError, call

log = logging.getLogger(__name__)

Metric = Callable[[Callable[[], Any]], MetricValue]
"""The device's reading wrapper: the value, ``n/a`` where the driver cannot say (a lost GPU marks it unhealthy)."""


def _remapped(handle: Any, position: int) -> int:
    return int(call("nvmlDeviceGetRemappedRows", handle)[position])


def _one_value(handle: Any, field_id: int) -> float:
    (value,) = call("nvmlDeviceGetFieldValues", handle, [field_id])
    if value.nvmlReturn != pynvml.NVML_SUCCESS:
        raise NvmlError("nvidia", "nvmlDeviceGetFieldValues", int(value.nvmlReturn), f"field {field_id}")
    kind = int(value.valueType)
    if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(value.value.dVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return float(value.value.ullVal)
    return float(value.value.uiVal)


class FieldReader:
    """One GPU's extra fields; keeps its XID event set and its last GPM sample between reads."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._events: Any = None
        self._events_tried = False
        self._xids = 0
        self._last_xid: int | None = None
        self._sample: Any = None
        self._gpm: bool | None = None

    def read(self, metric: Metric) -> dict[str, MetricValue]:
        h = self.handle
        out: dict[str, MetricValue] = {
            f.SM_CLOCK_MHZ: metric(lambda: call("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_SM)),
            f.MEMORY_CLOCK_MHZ: metric(lambda: call("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_MEM)),
            # KB/s, as the driver counts them
            f.PCIE_TX_BYTES_PER_S: metric(
                lambda: 1024 * call("nvmlDeviceGetPcieThroughput", h, pynvml.NVML_PCIE_UTIL_TX_BYTES)
            ),
            f.PCIE_RX_BYTES_PER_S: metric(
                lambda: 1024 * call("nvmlDeviceGetPcieThroughput", h, pynvml.NVML_PCIE_UTIL_RX_BYTES)
            ),
            f.ECC_CORRECTED_ERRORS: metric(lambda: self._ecc(pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED)),
            f.ECC_UNCORRECTED_ERRORS: metric(lambda: self._ecc(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)),
            f.RETIRED_PAGES_SINGLE_BIT: metric(lambda: self._retired(
                pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)),
            f.RETIRED_PAGES_DOUBLE_BIT: metric(lambda: self._retired(
                pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)),
            f.RETIRED_PAGES_PENDING: metric(lambda: call("nvmlDeviceGetRetiredPagesPendingStatus", h)),
            # millijoules since the driver loaded
            f.ENERGY_JOULES: metric(lambda: call("nvmlDeviceGetTotalEnergyConsumption", h) / 1000.0),
            f.MEMORY_TEMPERATURE_C: metric(lambda: _one_value(h, pynvml.NVML_FI_DEV_MEMORY_TEMP)),
            f.ENCODER_UTILIZATION_PCT: metric(lambda: call("nvmlDeviceGetEncoderUtilization", h)[0]),
            f.DECODER_UTILIZATION_PCT: metric(lambda: call("nvmlDeviceGetDecoderUtilization", h)[0]),
        }
        # nvmlDeviceGetRemappedRows: (correctable, uncorrectable, pending, failed)
        for key, position in ((f.REMAPPED_ROWS_CORRECTABLE, 0), (f.REMAPPED_ROWS_UNCORRECTABLE, 1),
                              (f.ROW_REMAP_PENDING, 2), (f.ROW_REMAP_FAILED, 3)):
            out[key] = metric(partial(_remapped, h, position))
        if self._watch_xids(metric):
            out[f.XID_ERRORS] = float(self._xids)
            if self._last_xid is not None:
                out[f.LAST_XID] = float(self._last_xid)
        out[f.TENSOR_ACTIVE_PCT] = metric(self._tensor_active)
        return {k: v for k, v in out.items() if not isinstance(v, str)}

    def _ecc(self, kind: int) -> int:
        return int(call("nvmlDeviceGetTotalEccErrors", self.handle, kind, pynvml.NVML_VOLATILE_ECC))

    def _retired(self, cause: int) -> int:
        return len(call("nvmlDeviceGetRetiredPages", self.handle, cause))

    def _watch_xids(self, metric: Metric) -> bool:
        """Drain the XID events that arrived since the last read; False where the GPU cannot report them."""
        if not self._events_tried:
            self._events_tried = True
            supported = metric(lambda: call("nvmlDeviceGetSupportedEventTypes", self.handle))
            if isinstance(supported, float) and int(supported) & pynvml.nvmlEventTypeXidCriticalError:
                events = call("nvmlEventSetCreate")
                call("nvmlDeviceRegisterEvents", self.handle, pynvml.nvmlEventTypeXidCriticalError, events)
                self._events = events
        if self._events is None:
            return False
        while True:
            try:
                data = call("nvmlEventSetWait_v2", self._events, 0)
            except NvmlError as exc:
                if exc.code != pynvml.NVML_ERROR_TIMEOUT:
                    log.warning("XID events of %s: %s", self.handle, exc)
                return True
            if int(data.eventType) & pynvml.nvmlEventTypeXidCriticalError:
                self._xids += 1
                self._last_xid = int(data.eventData)

    def _tensor_active(self) -> float:
        """Percent of the time since the previous read that a tensor pipe was busy (GPM)."""
        if self._gpm is None:
            self._gpm = bool(call("nvmlGpmQueryDeviceSupport", self.handle).isSupportedDevice)
        if not self._gpm:
            raise NvmlError("nvidia", "nvmlGpmQueryDeviceSupport", pynvml.NVML_ERROR_NOT_SUPPORTED, "no GPM")
        sample = call("nvmlGpmSampleGet", self.handle, call("nvmlGpmSampleAlloc"))
        previous, self._sample = self._sample, sample
        if previous is None:  # the first sample: an interval needs two
            raise NvmlError("nvidia", "nvmlGpmMetricsGet", pynvml.NVML_ERROR_NOT_SUPPORTED, "first sample")
        try:
            request = pynvml.c_nvmlGpmMetricsGet_t()
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = 1
            request.sample1, request.sample2 = previous, sample
            request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
            call("nvmlGpmMetricsGet", request)
        finally:
            call("nvmlGpmSampleFree", previous)
        got = request.metrics[0]
        if got.nvmlReturn != pynvml.NVML_SUCCESS:
            raise NvmlError("nvidia", "nvmlGpmMetricsGet", int(got.nvmlReturn), "tensor activity")
        return float(got.value)
