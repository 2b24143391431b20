"""Device readings beyond memory, utilization, temperature and power: the keys of ``DeviceReadings.extra``
(and ``Metrics.extra``), each with its unit in its name.

An adapter reports the ones its vendor library gives for a device and leaves the others out (a missing key
means the library cannot say, never 0); the exporter serves each under its own metric.  Counters
(``*_errors``, ``energy_joules``, ``xid_errors``) only grow while the driver runs.
"""

from __future__ import annotations

SM_CLOCK_MHZ = "sm_clock_mhz"  # the compute clock (NVML's SM clock, an AI core's or MLU's frequency)
MEMORY_CLOCK_MHZ = "memory_clock_mhz"
MEMORY_UTILIZATION_PCT = "memory_utilization_pct"  # share of time the memory was read or written
PCIE_TX_BYTES_PER_S = "pcie_tx_bytes_per_s"  # sent over PCIe by the device
PCIE_RX_BYTES_PER_S = "pcie_rx_bytes_per_s"
ECC_CORRECTED_ERRORS = "ecc_corrected_errors"  # single-bit, corrected (since the driver loaded)
ECC_UNCORRECTED_ERRORS = "ecc_uncorrected_errors"  # double-bit, not corrected
XID_ERRORS = "xid_errors"  # XID (critical driver error) events seen since the adapter started watching
LAST_XID = "last_xid"  # the last of them
RETIRED_PAGES_SINGLE_BIT = "retired_pages_single_bit"  # pages retired for repeated corrected errors
RETIRED_PAGES_DOUBLE_BIT = "retired_pages_double_bit"
RETIRED_PAGES_PENDING = "retired_pages_pending"  # 1: a retirement waits for the next driver reload
REMAPPED_ROWS_CORRECTABLE = "remapped_rows_correctable"
REMAPPED_ROWS_UNCORRECTABLE = "remapped_rows_uncorrectable"
ROW_REMAP_PENDING = "row_remap_pending"  # 1: a remap waits for a reset
ROW_REMAP_FAILED = "row_remap_failed"  # 1: a remap failed
ENERGY_JOULES = "energy_joules"  # total since the driver loaded
MEMORY_TEMPERATURE_C = "memory_temperature_c"
ENCODER_UTILIZATION_PCT = "encoder_utilization_pct"
DECODER_UTILIZATION_PCT = "decoder_utilization_pct"
TENSOR_ACTIVE_PCT = "tensor_active_pct"  # share of time any tensor pipe was busy

FIELDS: tuple[str, ...] = (
    SM_CLOCK_MHZ, MEMORY_CLOCK_MHZ, MEMORY_UTILIZATION_PCT, PCIE_TX_BYTES_PER_S, PCIE_RX_BYTES_PER_S,
    ECC_CORRECTED_ERRORS, ECC_UNCORRECTED_ERRORS, XID_ERRORS, LAST_XID, RETIRED_PAGES_SINGLE_BIT,
    RETIRED_PAGES_DOUBLE_BIT, RETIRED_PAGES_PENDING, REMAPPED_ROWS_CORRECTABLE, REMAPPED_ROWS_UNCORRECTABLE,
    ROW_REMAP_PENDING, ROW_REMAP_FAILED, ENERGY_JOULES, MEMORY_TEMPERATURE_C, ENCODER_UTILIZATION_PCT,
    DECODER_UTILIZATION_PCT, TENSOR_ACTIVE_PCT,
)
