"""Random allocate/release sequences never break the accounting invariants (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from hami_devices import DeviceHandle, InsufficientResources, UnknownAllocation, allocate
from hami_devices.config import parse_config
from hami_devices.ledger import MemoryLedger

from .helpers import node, simulated

NO_LIMITER = parse_config({"device-plugin": {"isolation-level": "none", "split-count": 4}})

parts = st.fixed_dictionaries(
    {
        "count": st.integers(1, 3),
        "memory_mib": st.integers(1, 30_000),
        "cores": st.sampled_from([0, 10, 25, 50, 100]),
    }
)


class AccountingMachine(RuleBasedStateMachine):
    handles = Bundle("handles")

    def __init__(self) -> None:
        super().__init__()
        self.ledger = MemoryLedger()
        self.devices = simulated(
            node("n", {"vendor": "nvidia", "model": "T4", "count": 2, "split_count": 4},
                 {"vendor": "nvidia", "model": "A30", "count": 2, "split_count": 4}),
            ledger=self.ledger,
            config=NO_LIMITER,
        )
        self.initial = {d.uuid: d.usage() for d in self.devices}
        self.live: dict[str, DeviceHandle] = {}

    @rule(target=handles, part_list=st.lists(parts, min_size=1, max_size=2), subset=st.integers(1, 4))
    def allocate_some(self, part_list: list[dict[str, Any]], subset: int) -> DeviceHandle | None:
        try:
            handle = allocate(self.devices[:subset], {"parts": part_list})
        except InsufficientResources:
            return None
        assert handle.id not in self.live
        self.live[handle.id] = handle
        return handle

    @rule(handle=consumes(handles))
    def release_one(self, handle: DeviceHandle | None) -> None:
        if handle is None:
            return
        self.devices[0].release(handle)
        del self.live[handle.id]
        try:
            self.devices[0].release(handle)
        except UnknownAllocation:
            pass
        else:
            raise AssertionError("a second release must raise UnknownAllocation")

    @invariant()
    def capacity_holds(self) -> None:
        for device in self.devices:
            usage = device.usage()
            assert usage.memory_mib <= device.info.memory_mib
            assert usage.cores <= 100
            assert usage.sharers <= device.info.split_count
            if usage.exclusive:
                assert usage.sharers == 1

    @invariant()
    def ledger_matches_live_handles(self) -> None:
        assert {h.id for h in self.ledger.handles()} == set(self.live)

    def teardown(self) -> None:
        for handle in list(self.live.values()):
            self.devices[0].release(handle)
        assert {d.uuid: d.usage() for d in self.devices} == self.initial


AccountingMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestAccounting = AccountingMachine.TestCase
