"""What NVML reports besides memory, utilization, temperature and power -- clocks, PCIe, ECC, retired pages,
remapped rows, energy, memory temperature, codec use, XID events, tensor activity -- read by the adapter from
the fake NVML, each figure as the fixture (fields.conf) gives it, and left out where the GPU cannot say."""

from __future__ import annotations

import pytest
from nvidia_helpers import FAKE_NVML_OLD, scenario


def test_every_field_the_driver_reports_is_read_and_no_other() -> None:
    h100, t4, bare = (m["extra"] for m in scenario("monitor", "2", "fields.conf")["metrics"])
    assert h100["sm_clock_mhz"] == 1980 and h100["memory_clock_mhz"] == 2619
    assert h100["pcie_tx_bytes_per_s"] == 1200 * 1024 and h100["pcie_rx_bytes_per_s"] == 3400 * 1024  # KB/s
    assert (h100["ecc_corrected_errors"], h100["ecc_uncorrected_errors"]) == (3, 0)
    assert (h100["remapped_rows_correctable"], h100["remapped_rows_uncorrectable"]) == (2, 0)
    assert (h100["row_remap_pending"], h100["row_remap_failed"]) == (0, 0)
    assert h100["memory_temperature_c"] == 52
    assert (h100["encoder_utilization_pct"], h100["decoder_utilization_pct"]) == (5, 12)
    # two XID events, seen once however often the device is read; the last one's code
    assert (h100["xid_errors"], h100["last_xid"]) == (2, 31)
    assert h100["tensor_active_pct"] == 37.5  # GPM, measured between the two reads
    assert h100["energy_joules"] >= 5000  # 5,000,000 mJ when loaded, growing with the power drawn since
    assert (t4["retired_pages_single_bit"], t4["retired_pages_double_bit"], t4["retired_pages_pending"]) == (1, 2, 1)
    assert (t4["ecc_corrected_errors"], t4["ecc_uncorrected_errors"]) == (0, 1)
    # Turing has no GPM and this board no row remapper: left out, never 0
    assert "tensor_active_pct" not in t4 and "remapped_rows_correctable" not in t4
    assert set(bare) == {"memory_utilization_pct", "xid_errors"}  # a board that reports none of them


def test_tensor_activity_needs_two_samples() -> None:
    (h100, _, _) = scenario("monitor", "1", "fields.conf")["metrics"]
    assert "tensor_active_pct" not in h100["extra"]  # one read: no interval yet


@pytest.mark.parametrize("key", ["tensor_active_pct", "remapped_rows_correctable"])
def test_an_old_driver_without_the_query_reports_not_available(key: str) -> None:
    (h100, _, _) = scenario("monitor", "2", "fields.conf", FAKE_NVML_OLD)["metrics"]
    assert key not in h100["extra"] and h100["extra"]["sm_clock_mhz"] == 1980
