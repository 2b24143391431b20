"""What DCMI reports besides memory, utilization, temperature and power -- the AI Core clock, the HBM's clock,
temperature and bandwidth use, ECC errors and isolated (retired) pages -- read through cffi from the fake
libdcmi.so, each figure as the fixture gives it, and left out where the chip cannot say."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hami_ascend.adapter import AscendAdapter

from hami_devices import MemoryLedger
from hami_devices.config import parse_config

CONFIG = parse_config({"device-plugin": {"isolation-level": "none"}})
FIELDS = "aicore_mhz=1800\nhbm_mhz=2600\nhbm_temp=55\necc=4 1 2 1\n"


def test_every_field_dcmi_reports_is_read_and_no_other(dcmi_node: Callable[[str], Path]) -> None:
    fixture = dcmi_node("910b3x8.dcmi")
    first_chip_ends = fixture.read_text().index("power=1000\n") + len("power=1000\n")
    text = fixture.read_text()
    fixture.write_text(text[:first_chip_ends] + FIELDS + text[first_chip_ends:])
    first, second = (d.monitor().extra for d in AscendAdapter(CONFIG).discover(MemoryLedger())[:2])
    assert first["sm_clock_mhz"] == 1800  # the AI Core's current frequency
    assert (first["memory_clock_mhz"], first["memory_temperature_c"], first["memory_utilization_pct"]) == (2600, 55, 5)
    assert (first["ecc_corrected_errors"], first["ecc_uncorrected_errors"]) == (4, 1)
    assert (first["retired_pages_single_bit"], first["retired_pages_double_bit"]) == (2, 1)
    # the second chip's fixture gives no AI Core clock and no ECC: left out, never 0
    assert "sm_clock_mhz" not in second and "ecc_corrected_errors" not in second
    assert second["memory_temperature_c"] == 41  # DCMI's HBM reading (the fake reports the chip's by default)


def test_a_chip_without_hbm_reports_the_ecc_of_its_ddr(dcmi_node: Callable[[str], Path]) -> None:
    fixture = dcmi_node("310p_vnpu.dcmi")
    fixture.write_text(fixture.read_text().replace("[chip]\n", "[chip]\necc=7 0 0 0\n", 1))
    extra = AscendAdapter(CONFIG).discover(MemoryLedger())[0].monitor().extra
    assert extra["ecc_corrected_errors"] == 7
    assert "memory_clock_mhz" not in extra and "memory_temperature_c" not in extra  # no HBM
