"""Pair scores (pure): NVLink outranks PCIe, more links outrank fewer, NVSwitch links count."""

from __future__ import annotations

from collections import Counter

from hami_nvidia.topology import GpuLinks, nvlink_score, pair_scores, pcie_score


def test_nvlink_outranks_any_pcie_and_more_links_outrank_fewer() -> None:
    assert nvlink_score(1) > max(pcie_score(level) for level in (0, 10, 20, 30, 40, 50))
    assert nvlink_score(18) == 100 and nvlink_score(12) > nvlink_score(6) > nvlink_score(1)
    assert pcie_score(10) > pcie_score(20) > pcie_score(30) > pcie_score(40) > pcie_score(50) > 0
    assert pcie_score(None) == 0


def test_switch_and_direct_links() -> None:
    a = GpuLinks("a", "00000000:01:00.0", Counter({"00000000:C0:00.0": 9, "00000000:02:00.0": 2}))
    b = GpuLinks("b", "00000000:02:00.0", Counter({"00000000:C0:00.0": 9, "00000000:01:00.0": 2}))
    c = GpuLinks("c", "00000000:03:00.0", Counter({"00000000:C0:00.0": 3}))
    d = GpuLinks("d", "00000000:04:00.0")
    scores = pair_scores([a, b, c, d], {("a", "d"): 10, ("b", "d"): 50, ("c", "d"): 40})
    assert scores["a"]["b"] == nvlink_score(11)  # 2 direct + 9 through the shared switch
    assert scores["a"]["c"] == nvlink_score(3)
    assert scores["a"]["d"] == pcie_score(10) and scores["d"]["b"] == pcie_score(50)
    assert scores["a"]["c"] == scores["c"]["a"]
