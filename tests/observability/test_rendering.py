"""The incremental renderer (parts kept while their input is unchanged) against rendering from scratch and
against ``prometheus_client``, through any sequence of grants, releases, region usage and vendor readings."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from prometheus_client import CollectorRegistry, generate_latest

import hami_devices as hd
from hami_devices import _native  # type: ignore[attr-defined]
from hami_devices.device import Device, DeviceReadings
from hami_devices.errors import InsufficientResources
from hami_devices.ledger import MemoryLedger
from hami_devices.limiter import Region
from hami_devices.models import DeviceHandle, Health
from hami_devices.observability.collector import families
from hami_devices.observability.exposition import TextRenderer
from hami_devices.observability.snapshot import Sampler
from tests.observability.helpers import simulated, t4_node
from tests.observability.test_exporter import _Fixed, _normalised, _third_party


class Ticking(Device):
    """A vendor library whose readings the test moves (``None``: a reading it cannot give)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.memory: int | None = 100
        self.health = Health.HEALTHY

    def read(self) -> DeviceReadings:
        if self.memory is None:
            return DeviceReadings(health=self.health)
        return DeviceReadings(memory_used_mib=self.memory, utilization_pct=self.memory % 101, health=self.health)


class Rendering(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ledger = MemoryLedger()
        self.devices = simulated(self.ledger, t4_node(2))
        self.ticking = _third_party(Ticking, self.devices[0], "tick")
        assert isinstance(self.ticking, Ticking)
        self.sampler = Sampler([*self.devices, self.ticking], self.ledger)
        self.renderer = TextRenderer()  # kept across every step, as the exporter keeps it
        self.live: list[DeviceHandle] = []
        self.regions: list[Region] = []

    @rule(memory=st.integers(1, 4096), cores=st.sampled_from([0, 10, 30, 100]), count=st.integers(1, 2),
          pod=st.sampled_from(["a", "b", 'we"ird\\pod\n', ""]))
    def allocate(self, memory: int, cores: int, count: int, pod: str) -> None:
        request = {"parts": [{"count": count, "memory_mib": memory, "cores": cores}]}
        with contextlib.suppress(InsufficientResources):  # a full node refuses: nothing to render then
            self.live.append(hd.allocate(self.devices, request, metadata={"pod": pod} if pod else {}))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        # this process may hold a slot in its region (``hold``): release as the workload goes on
        hd.release(self.live.pop(data.draw(st.integers(0, len(self.live) - 1))), ledger=self.ledger, force=True)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), nbytes=st.integers(1, 1 << 24))
    def hold(self, data: st.DataObject, nbytes: int) -> None:
        """This process takes a slot in an allocation's region and reserves memory, as a shim would."""
        handle = self.live[data.draw(st.integers(0, len(self.live) - 1))]
        (path,) = handle.regions.values()
        region = Region.open(path)
        self.regions.append(region)
        lib = _native.lib
        slot = lib.hami_region_register(region._handle, os.getpid(), lib.hami_proc_start_time(os.getpid()))
        assert slot >= 0
        lib.hami_region_reserve(region._handle, slot, 0, nbytes)

    @rule(memory=st.one_of(st.none(), st.integers(0, 15000)), healthy=st.booleans())
    def tick(self, memory: int | None, healthy: bool) -> None:
        assert isinstance(self.ticking, Ticking)
        self.ticking.memory = memory
        self.ticking.health = Health.HEALTHY if healthy else Health.UNHEALTHY

    @invariant()
    def renders_as_from_scratch_and_as_prometheus_client(self) -> None:
        snapshot = self.sampler.snapshot()
        ours = self.renderer.render(snapshot)
        assert ours == TextRenderer().render(snapshot)  # what was kept never changes what is said
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Fixed(families(snapshot)))
        assert _normalised(ours.decode()) == _normalised(generate_latest(registry).decode())

    def teardown(self) -> None:
        for region in self.regions:
            region.close()
        self.sampler.close()


Rendering.TestCase.settings = settings(max_examples=15, stateful_step_count=12, deadline=None)
test_rendering = Rendering.TestCase


def test_a_renderer_given_other_devices_labels_grants_from_them() -> None:
    """Grants take their device labels (pci_bus_id here) from the devices the snapshot describes."""
    ledger = MemoryLedger()
    (device,) = simulated(ledger, t4_node(1))
    hd.allocate([device], {"parts": [{"memory_mib": 64}]}, metadata={"pod": "p"})
    located = type(device)(device.info.model_copy(update={"pci_bus_id": "0000:3b:00.0"}), device.adapter, ledger)
    renderer = TextRenderer()
    blind, seeing = Sampler([], ledger), Sampler([located], ledger)
    try:
        assert b'pci_bus_id="0000:3b:00.0"' not in renderer.render(blind.snapshot())
        snapshot = seeing.snapshot()
        ours = renderer.render(snapshot)
        assert ours == TextRenderer().render(snapshot)
        assert b'hami_allocation_info{node="n",vendor="nvidia",model="T4"' in ours
        assert ours.count(b'pci_bus_id="0000:3b:00.0"') > 10
    finally:
        blind.close()
        seeing.close()
