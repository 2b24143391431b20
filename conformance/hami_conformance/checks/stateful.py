"""A hypothesis state machine: random allocate/release/monitor sequences, invariants after every step.

Deterministic by construction: hypothesis replays each example to shrink it and checks that the same
choices lead to the same draws.  Handle ids are random uuids, so the machine never draws from them
(or from an order they define): live and released handles are chosen by their position in issue order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from hami_conformance.bench import Bench, CheckFailed, Target, capacity, expect, profiles_of, share
from hami_conformance.checks import check
from hami_conformance.invariants import bench_problems, grant_problems
from hami_devices.device import Device
from hami_devices.errors import InsufficientResources, InvalidRequest, UnknownAllocation
from hami_devices.models import DeviceHandle, RequestPart

EXAMPLES_ENV = "HAMI_CONFORMANCE_EXAMPLES"
"""Overrides the number of random sequences (the plugin's --hami-examples sets it)."""

DEFAULT_EXAMPLES = 15
STEPS = 20

BAD_REQUESTS: list[Any] = [
    {"parts": [{"memory_mib": -5}]},
    {"parts": [{"count": 0}]},
    {"parts": [{"cores": 101}]},
    {"parts": [{"memory_percent": 150}]},
    {"parts": [{"memory_mib": 1, "surprise": True}]},
    {"parts": []},
    {"parts": [{"memory_mib": "plenty"}]},
    "not a request",
]


@dataclass
class Shadow:
    """The machine's own model of one device: what its live grants hold."""

    memory: int = 0
    cores: int = 0
    sharers: int = 0
    exclusive: bool = False


class AllocationMachine(RuleBasedStateMachine):
    """Drives one fresh bench; the shadow model predicts every grant and refusal."""

    target: Target

    def __init__(self) -> None:
        super().__init__()
        self.bench: Bench = self.target.bench()
        self.devices: list[Device] = self.bench.devices
        self.shadow: dict[str, Shadow] = {d.uuid: Shadow() for d in self.devices}
        self.live: dict[str, DeviceHandle] = {}  # insertion order = issue order
        self.released: list[DeviceHandle] = []  # release order

    # -- the model -------------------------------------------------------------
    def fits(self, device: Device, part: RequestPart) -> bool:
        cap = capacity(device)
        model = self.shadow[device.uuid]
        memory = part.memory_for(device.info.memory_mib)
        return (
            device.info.healthy
            and (not part.uuids or device.uuid in part.uuids)
            and not model.exclusive
            and not (part.exclusive and model.sharers > 0)
            and model.sharers + 1 <= cap.split_count
            and model.memory + memory <= cap.memory_mib
            and model.cores + part.cores <= cap.cores
        )

    def node_groups(self, devices: list[Device]) -> list[list[Device]]:
        groups: dict[str, list[Device]] = {}
        for device in devices:
            groups.setdefault(device.info.node, []).append(device)
        return list(groups.values())

    def record(self, handle: DeviceHandle) -> None:
        expect(handle.id not in self.live, f"handle id {handle.id} was issued twice")
        expect(handle.id not in {h.id for h in self.released}, f"handle id {handle.id} reused after release")
        for grant in handle.grants:
            model = self.shadow[grant.uuid]
            model.memory += grant.memory_mib
            model.cores += grant.cores
            model.sharers += 1
            model.exclusive = model.exclusive or grant.exclusive
        self.live[handle.id] = handle

    def forget(self, handle: DeviceHandle) -> None:
        del self.live[handle.id]
        self.released.append(handle)
        for grant in handle.grants:
            model = self.shadow[grant.uuid]
            model.memory -= grant.memory_mib
            model.cores -= grant.cores
            model.sharers -= 1
            if grant.exclusive:
                model.exclusive = False

    # -- rules -------------------------------------------------------------------
    @rule(
        data=st.data(),
        count=st.integers(1, 3),
        fraction=st.sampled_from([1, 2, 3, 4, 8, 16]),
        cores=st.sampled_from([0, 0, 10, 25, 50, 100]),
        percent=st.booleans(),
        pin=st.booleans(),
    )
    def allocate(self, data: st.DataObject, count: int, fraction: int, cores: int, percent: bool, pin: bool) -> None:
        reference = max(self.devices, key=lambda d: d.info.memory_mib)
        fields: dict[str, Any] = {"count": count, "cores": cores}
        if percent:
            fields["memory_percent"] = round(100 / fraction, 2)
        else:
            fields["memory_mib"] = max(1, capacity(reference).memory_mib // fraction)
        single: Device | None = None
        if pin and count == 1:
            single = data.draw(st.sampled_from(self.devices), label="device")
        request = share(**fields)
        part = request.parts[0]
        candidates = [[single]] if single is not None else self.node_groups(self.devices)
        feasible = any(sum(self.fits(d, part) for d in group) >= count for group in candidates)
        # Liveness (a request that fits must be granted) is predictable only where shares are never
        # rounded up: on devices without partition profiles.
        certain = any(sum(self.fits(d, part) and not profiles_of(d) for d in group) >= count for group in candidates)
        try:
            if single is not None:
                handle = self.bench.allocate_on(single, request)
            else:
                handle = self.bench.allocate_many(self.devices, request)
        except InsufficientResources as exc:
            expect(
                not certain, f"refused a request that fits ({fields}, on {'one device' if single else 'any'}): {exc}"
            )
            expect(exc.reasons, "InsufficientResources without reason codes")
            return
        expect(feasible, f"granted a request that does not fit: {fields} -> {[g.uuid for g in handle.grants]}")
        expect(len(handle.grants) == count, f"asked {count} devices, got {len(handle.grants)} grants")
        expect(len(set(handle.uuids)) == count, f"grants are not on distinct devices: {handle.uuids}")
        for grant in handle.grants:
            device = self.bench.by_uuid(grant.uuid)
            expect(self.fits(device, part), f"granted on {grant.uuid}, which has no room for {fields}")
            problems = grant_problems(device, handle, grant)
            expect(not problems, "; ".join(problems))
        self.record(handle)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        issued = list(self.live.values())
        handle = issued[data.draw(st.integers(0, len(issued) - 1), label="live handle, by issue order")]
        self.bench.release(handle)
        self.forget(handle)

    @precondition(lambda self: bool(self.released))
    @rule(data=st.data())
    def release_again(self, data: st.DataObject) -> None:
        handle = self.released[data.draw(st.integers(0, len(self.released) - 1), label="released handle, by order")]
        try:
            self.bench.release(handle)
        except UnknownAllocation:
            return
        raise CheckFailed(f"a second release of {handle.id} did not raise UnknownAllocation")

    @rule(handle_id=st.text("0123456789abcdef", min_size=32, max_size=32))
    def release_unknown(self, handle_id: str) -> None:
        if handle_id in self.live:
            return
        try:
            self.bench.release(handle_id)
        except UnknownAllocation:
            return
        raise CheckFailed(f"releasing never-issued id {handle_id} did not raise UnknownAllocation")

    @rule(bad=st.sampled_from(BAD_REQUESTS), data=st.data())
    def bad_request(self, bad: Any, data: st.DataObject) -> None:
        device = data.draw(st.sampled_from(self.devices), label="device")
        try:
            handle = self.bench.allocate_on(device, bad)
        except InvalidRequest:
            return
        except Exception as exc:
            raise CheckFailed(f"bad request {bad!r} raised {type(exc).__name__}: {exc}, not InvalidRequest") from exc
        self.record(handle)
        raise CheckFailed(f"bad request {bad!r} was granted")

    @rule(data=st.data())
    def monitor(self, data: st.DataObject) -> None:
        device = data.draw(st.sampled_from(self.devices), label="device")
        metrics = device.monitor()
        model = self.shadow[device.uuid]
        expect(
            (metrics.allocated_memory_mib, metrics.allocated_cores, metrics.sharers)
            == (model.memory, model.cores, model.sharers),
            f"monitor({device.uuid}) says {metrics.allocated_memory_mib} MiB/{metrics.allocated_cores}%/"
            f"{metrics.sharers} sharers, the live grants hold {model.memory}/{model.cores}/{model.sharers}",
        )

    # -- invariants, after every step ---------------------------------------------
    @invariant()
    def ledger_matches_model(self) -> None:
        live = self.bench.live_ids()
        expect(live == set(self.live), f"ledger holds {sorted(live)}, the returned handles are {sorted(self.live)}")
        for device in self.devices:
            usage = self.bench.state(device).usage
            model = self.shadow[device.uuid]
            expect(
                (usage.memory_mib, usage.cores, usage.sharers) == (model.memory, model.cores, model.sharers),
                f"{device.uuid}: ledger usage {usage}, the issued grants hold {model}",
            )

    @invariant()
    def capacity_rules(self) -> None:
        problems = bench_problems(self.bench)
        expect(not problems, "; ".join(problems[:5]))

    def teardown(self) -> None:
        self.bench.cleanup()


@check("stateful.random-sequences")
def random_sequences(bench: Bench) -> None:
    bench.cleanup()  # the machine builds a fresh bench per sequence
    examples = int(os.environ.get(EXAMPLES_ENV, DEFAULT_EXAMPLES))
    machine = type("AllocationMachineFor_" + bench.adapter.name.replace("-", "_"), (AllocationMachine,), {})
    machine.target = bench.target  # type: ignore[attr-defined]
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
            print_blob=False,
            report_multiple_bugs=False,
        ),
    )
