"""A third-party vendor with a placement rule of its own, built as a plugin author would.

Its devices are partitioned into tiles, and a device holds either tile
partitions or plain shares, never both ("one partition mode per device").
Nothing in the core knows that rule; it reaches the engine only through
``VendorAdapter.plan_grant``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import ReasonCode
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceInfo, DeviceTraits, Grant, Interconnect, PartitionProfile, RequestPart
from hami_devices.plugin import Capability, Device, Probe, VendorAdapter

TRAITS = DeviceTraits(
    vendor="acme",
    model="AC-1",
    generation="tile-1",
    year=2024,
    memory_mib=24_576,
    memory_bandwidth_gbps=800,
    peak_tflops={"fp32": 20, "fp16": 80, "bf16": 80, "int8": 160},
    interconnect=Interconnect(kind="pcie", bandwidth_gbps=32),
    tdp_watts=150,
    relative_cost=0.2,
)


class AcmeAdapter(VendorAdapter):
    name = "acme"
    capabilities = frozenset({Capability.SIMULATED, Capability.PARTITIONS})
    visible_devices_env = ("ACME_VISIBLE_DEVICES",)

    def probe(self) -> Probe:
        return Probe(False, "simulated only")

    def discover(self, ledger: Ledger) -> list[Device]:
        return []

    def simulate(self, infos: Sequence[DeviceInfo], ledger: Ledger) -> list[Device]:
        return super().simulate(infos, ledger)

    def traits_for(self, model: str) -> DeviceTraits | None:
        return TRAITS if model == "AC-1" else None

    def partition_catalog(self, model: str) -> list[PartitionProfile]:
        return [
            PartitionProfile(name="tile.1", memory_mib=6_144, cores=25, max_instances=4),
            PartitionProfile(name="tile.2", memory_mib=12_288, cores=50, max_instances=2),
        ]

    def plan_grant(
        self, info: DeviceInfo, part: RequestPart, part_index: int, usage: DeviceUsage
    ) -> Grant | ReasonCode:
        plain_holders = usage.sharers - len(usage.partitions)
        if part.partition is None and usage.partitions:
            return ReasonCode.CARD_PARTITION_UNAVAILABLE  # tiles on it: no plain shares
        if part.partition is not None and plain_holders > 0:
            return ReasonCode.CARD_PARTITION_UNAVAILABLE  # plain shares on it: no tiles
        return super().plan_grant(info, part, part_index, usage)
