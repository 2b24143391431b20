"""What CNDev reports besides memory, utilization, temperature and power -- the MLU's and its memory's clocks,
ECC errors, PCIe throughput, memory temperature -- read through cffi from the fake libcndev.so, each figure as
the fixture gives it, and left out where the device cannot say."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hami_cambricon.adapter import CambriconAdapter

from hami_devices import MemoryLedger
from hami_devices.config import parse_config

CONFIG = parse_config({"device-plugin": {"isolation-level": "none"}})
FIELDS = "clocks=1300 3200\necc=6 2\npcie=1000 3000\nmemory_temp=51\n"


def test_every_field_cndev_reports_is_read_and_no_other(cndev_node: Callable[[str], Path]) -> None:
    fixture = cndev_node("mlu370x8.cndev")
    fixture.write_text(fixture.read_text().replace("smlu=0\n", "smlu=0\n" + FIELDS, 1))  # the first MLU
    first, second = (d.monitor().extra for d in CambriconAdapter(CONFIG).discover(MemoryLedger())[:2])
    assert (first["sm_clock_mhz"], first["memory_clock_mhz"]) == (1300, 3200)
    assert (first["ecc_corrected_errors"], first["ecc_uncorrected_errors"]) == (6, 2)
    # CNDev counts bytes over the last 20 ms: 1000 read (received by the MLU) and 3000 written (sent)
    assert (first["pcie_rx_bytes_per_s"], first["pcie_tx_bytes_per_s"]) == (50_000, 150_000)
    assert first["memory_temperature_c"] == 51
    # the second MLU's fixture gives none of them: left out, never 0 (CNDev always reports memory temperature)
    assert set(second) == {"memory_temperature_c"}
