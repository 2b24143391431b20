"""Pair scores between the GPUs of one node, from NVLink state and the PCIe tree.

Score scale (0..100; the allocator's ``topology: required`` threshold is 50):

* NVLink: 60 + 40 * links / 18, so any NVLink pair (61..100) outranks any PCIe
  path and more active links outrank fewer.  Links that reach an NVSwitch
  connect every two GPUs on that switch; a pair then counts the links both
  GPUs have to the switches they share.
* PCIe, by the deepest common ancestor NVML reports: same board 48, one switch
  40, several switches 32, one host bridge 24, one NUMA node 16, across the
  system (SMP interconnect) 8.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

NVLINK_BASE = 60
NVLINK_SPAN = 40
NVLINK_FULL_LINKS = 18

PCIE_SCORES: dict[int, int] = {
    0: 48,  # NVML_TOPOLOGY_INTERNAL
    10: 40,  # NVML_TOPOLOGY_SINGLE
    20: 32,  # NVML_TOPOLOGY_MULTIPLE
    30: 24,  # NVML_TOPOLOGY_HOSTBRIDGE
    40: 16,  # NVML_TOPOLOGY_NODE
    50: 8,  # NVML_TOPOLOGY_SYSTEM
}
UNKNOWN_PATH_SCORE = 0


@dataclass
class GpuLinks:
    """What one GPU's NVLinks reach: remote PCI bus id -> number of active links."""

    uuid: str
    bus_id: str
    remotes: Counter[str] = field(default_factory=Counter)


def nvlink_score(links: int) -> int:
    if links <= 0:
        return 0
    return NVLINK_BASE + round(NVLINK_SPAN * min(links, NVLINK_FULL_LINKS) / NVLINK_FULL_LINKS)


def pcie_score(level: int | None) -> int:
    if level is None:
        return UNKNOWN_PATH_SCORE
    return PCIE_SCORES.get(level, UNKNOWN_PATH_SCORE)


def nvlinks_between(a: GpuLinks, b: GpuLinks, gpu_buses: set[str]) -> int:
    """Active links joining two GPUs, directly or through shared NVSwitches."""
    direct = min(a.remotes.get(b.bus_id, 0), b.remotes.get(a.bus_id, 0)) or max(
        a.remotes.get(b.bus_id, 0), b.remotes.get(a.bus_id, 0)
    )
    switched_a = sum(n for bus, n in a.remotes.items() if bus not in gpu_buses and bus in b.remotes)
    switched_b = sum(n for bus, n in b.remotes.items() if bus not in gpu_buses and bus in a.remotes)
    return direct + min(switched_a, switched_b)


def pair_scores(
    gpus: Sequence[GpuLinks], pcie_levels: Mapping[tuple[str, str], int | None]
) -> dict[str, dict[str, int]]:
    """uuid -> {other uuid -> score} for every two GPUs."""
    buses = {g.bus_id for g in gpus}
    scores: dict[str, dict[str, int]] = {g.uuid: {} for g in gpus}
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            links = nvlinks_between(a, b, buses)
            level = pcie_levels.get((a.uuid, b.uuid), pcie_levels.get((b.uuid, a.uuid)))
            score = nvlink_score(links) if links else pcie_score(level)
            scores[a.uuid][b.uuid] = score
            scores[b.uuid][a.uuid] = score
    return scores
