"""Adapters for testing the suite itself: one correct control, and many with one bug each.

Each broken adapter is what a plugin author might plausibly write; the suite
must fail the check that names its bug.  They run on simulated devices they
build themselves (``conformance_profile().devices``), like a third-party
vendor the core traits catalog does not know.

The module stays importable by earlier versions of the suite (``profile``
passes only the Profile fields the installed suite knows), so it can be shown
that the suite before these checks certified each of the newer broken adapters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import sys
import threading
import time
import uuid as uuid_module
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from hami_ascend.adapter import AscendAdapter
from hami_cambricon.adapter import CambriconAdapter
from hami_conformance import Profile, WorkloadProgram
from hami_nvidia.adapter import NvidiaAdapter

from hami_devices.accounting import DeviceUsage
from hami_devices.adapter import Capability, Probe, VendorAdapter
from hami_devices.allocation import coerce_request
from hami_devices.device import Device, DeviceReadings
from hami_devices.errors import InsufficientResources, ReasonCode, UnknownAllocation, VendorLibraryError
from hami_devices.ledger import Ledger
from hami_devices.limiter import fake_library
from hami_devices.models import (
    DeviceHandle,
    DeviceInfo,
    DeviceTraits,
    Grant,
    Health,
    Interconnect,
    PartitionProfile,
    RequestPart,
    ResourceRequest,
)
from hami_devices.rules import evaluate

VENDOR = "plainsim"
MODELS = {"Plain-16G": 16384, "Plain-8G": 8192}


def profile(**fields: Any) -> Profile:
    """A Profile with the fields this suite version knows (earlier ones lack the newer fields)."""
    known = {f.name for f in dataclasses.fields(Profile)}
    return Profile(**{k: v for k, v in fields.items() if k in known})


def traits(model: str) -> DeviceTraits:
    return DeviceTraits(
        vendor=VENDOR,
        model=model,
        generation="test",
        year=2026,
        memory_mib=MODELS[model],
        memory_bandwidth_gbps=500.0,
        peak_tflops={"fp32": 20.0, "fp16": 80.0},
        interconnect=Interconnect(kind="pcie", bandwidth_gbps=32.0),
        tdp_watts=200.0,
        relative_cost=0.3,
    )


class PlainDevice(Device):
    """Readings a simulator can honestly give: health only."""

    def read(self) -> DeviceReadings:
        return DeviceReadings(health=self.info.health)


class PlainAdapter(VendorAdapter):
    """The control: correct in every way the suite checks."""

    name: ClassVar[str] = VENDOR
    version: ClassVar[str] = "0.0.1"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.SIMULATED, Capability.PARTITIONS, Capability.TOPOLOGY}
    )
    visible_devices_env: ClassVar[tuple[str, ...]] = ("PLAIN_VISIBLE_DEVICES",)
    device_class: ClassVar[type[Device]] = PlainDevice

    def probe(self) -> Probe:
        return Probe(False, "simulated test vendor: no hardware back end")

    def discover(self, ledger: Ledger) -> list[Device]:
        return []

    def simulate(self, infos: Sequence[DeviceInfo], ledger: Ledger) -> list[Device]:
        return [self.device_class(self.complete_info(info), self, ledger) for info in infos]

    def partition_catalog(self, model: str) -> list[PartitionProfile]:
        if model != "Plain-16G":
            return []
        return [
            PartitionProfile(name="quarter", memory_mib=4096, cores=25, max_instances=4),
            PartitionProfile(name="half", memory_mib=8192, cores=50, max_instances=2),
            PartitionProfile(name="full", memory_mib=16384, cores=100, max_instances=1),
        ]

    def device_uuid(self, index: int) -> str:
        return f"PLAIN-{index:04d}"

    def devices(self, ledger: Ledger) -> list[Device]:
        layout = [("Plain-16G", Health.HEALTHY), ("Plain-8G", Health.HEALTHY), ("Plain-8G", Health.HEALTHY)]
        layout.append(("Plain-8G", Health.UNHEALTHY))
        infos = [
            DeviceInfo(
                uuid=self.device_uuid(index),
                index=index,
                vendor=VENDOR,
                model=model,
                memory_mib=MODELS[model],
                split_count=4,
                health=health,
                traits=traits(model),
                topology={self.device_uuid(other): 40 for other in range(len(layout)) if other != index},
            )
            for index, (model, health) in enumerate(layout)
        ]
        return self.simulate(infos, ledger)

    def conformance_profile(self) -> Profile:
        return profile(devices=self.devices)


# -- 1. over-allocates: "the driver pages, so let it through" ------------------------


class OverAllocatingDevice(PlainDevice):
    def allocate(self, request: ResourceRequest | Mapping[str, Any]) -> DeviceHandle:
        try:
            return super().allocate(request)
        except InsufficientResources as exc:
            if exc.codes - {ReasonCode.CARD_INSUFFICIENT_MEMORY, ReasonCode.NODE_INSUFFICIENT_DEVICES}:
                raise
            req = coerce_request(request)
            grant = Grant(
                uuid=self.uuid,
                node=self.info.node,
                vendor=self.info.vendor,
                model=self.info.model,
                index=self.info.index,
                part=0,
                memory_mib=req.parts[0].memory_for(self.info.memory_mib),
                cores=req.parts[0].cores,
            )
            handle = DeviceHandle(request=req, grants=[grant], env=self.adapter.environment([grant], None))
            with self.ledger.transaction() as view:
                view.add(handle)
            return handle


class OverAllocatingAdapter(PlainAdapter):
    device_class = OverAllocatingDevice


# -- 2. double-frees: release "made idempotent" ---------------------------------------


class DoubleFreeDevice(PlainDevice):
    def release(self, handle: DeviceHandle | str) -> None:
        with contextlib.suppress(UnknownAllocation):  # already gone: fine
            super().release(handle)


class DoubleFreeAdapter(PlainAdapter):
    device_class = DoubleFreeDevice


# -- 3. leaks on a failed multi-device request: reserves while planning --------------


class LeakyDevice(PlainDevice):
    def read(self) -> DeviceReadings:
        adapter = self.adapter
        assert isinstance(adapter, LeakyAdapter)
        return DeviceReadings(health=self.info.health, memory_used_mib=float(adapter.reserved.get(self.uuid, 0)))


class LeakyAdapter(PlainAdapter):
    """Reserves device memory in plan_grant (to 'pin' it early) and frees it only in teardown."""

    device_class = LeakyDevice

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reserved: dict[str, int] = {}

    def plan_grant(
        self, info: DeviceInfo, part: RequestPart, part_index: int, usage: DeviceUsage
    ) -> Grant | ReasonCode:
        planned = super().plan_grant(info, part, part_index, usage)
        if isinstance(planned, Grant):
            self.reserved[info.uuid] = self.reserved.get(info.uuid, 0) + planned.memory_mib
        return planned

    def teardown(self, grants: list[Grant]) -> None:
        for grant in grants:
            self.reserved[grant.uuid] = self.reserved.get(grant.uuid, 0) - grant.memory_mib

    def devices(self, ledger: Ledger) -> list[Device]:
        self.reserved.clear()
        return super().devices(ledger)


# -- 4. reports 0 for metrics it cannot read -------------------------------------------


class ZeroMetricDevice(PlainDevice):
    def read(self) -> DeviceReadings:
        return DeviceReadings(
            health=self.info.health, memory_used_mib=0.0, utilization_pct=0.0, temperature_c=0.0, power_w=0.0
        )


class ZeroMetricAdapter(PlainAdapter):
    device_class = ZeroMetricDevice


# -- 5. not thread-safe: its own "fast path" checks, then writes -----------------------


class RacyDevice(PlainDevice):
    def allocate(self, request: ResourceRequest | Mapping[str, Any]) -> DeviceHandle:
        req = coerce_request(request)
        if len(req.parts) != 1 or req.parts[0].count != 1:
            return super().allocate(req)
        part = req.parts[0]
        usage = self.usage()  # read outside any transaction ...
        planned = evaluate(self.info, self.adapter, part, 0, usage)
        if not isinstance(planned, Grant):
            raise InsufficientResources("does not fit", {self.uuid: planned})
        time.sleep(0.002)  # ... talk to the driver ...
        handle = DeviceHandle(request=req, grants=[planned], env=self.adapter.environment([planned], None))
        with self.ledger.transaction() as view:  # ... and write without re-checking
            view.add(handle)
        return handle


class RacyAdapter(PlainAdapter):
    device_class = RacyDevice


# -- 6. grants overlapping partitions: accounts the request, not the profile ------------


class OverlappingPartitionAdapter(PlainAdapter):
    _lock = threading.Lock()

    def plan_grant(
        self, info: DeviceInfo, part: RequestPart, part_index: int, usage: DeviceUsage
    ) -> Grant | ReasonCode:
        planned = super().plan_grant(info, part, part_index, usage)
        if isinstance(planned, Grant) and planned.partition and part.partition not in (None, "auto"):
            # bug: the grant carries what was asked instead of the whole profile
            memory = part.memory_for(info.memory_mib)
            return planned.model_copy(update={"memory_mib": memory, "cores": part.cores})
        return planned

    def choose_profile(
        self, info: DeviceInfo, part: RequestPart, memory_mib: int, usage: DeviceUsage
    ) -> PartitionProfile | None:
        # bug: ignores how many instances are already placed
        profiles = [
            p for p in self.partition_catalog(info.model) if p.name == part.partition or part.partition == "auto"
        ]
        fitting = [p for p in profiles if p.memory_mib >= memory_mib and p.cores >= part.cores]
        return min(fitting, key=lambda p: (p.memory_mib, p.cores), default=None)

    def prepare(self, grants: list[Grant]) -> list[Grant]:
        return [
            g.model_copy(update={"partition_uuid": f"{g.uuid}/{g.partition}/0"}) if g.partition else g for g in grants
        ]


# -- 7. declares a memory limit but forgets to preload its limiter ---------------------


class UnenforcedLimiterAdapter(PlainAdapter):
    capabilities = PlainAdapter.capabilities | {Capability.MEMORY_LIMIT}
    limiter_shim = "libhami_cuda.so"

    def environment(self, grants: list[Grant], region_path: str | None) -> dict[str, str]:
        env = super().environment(grants, region_path)
        env.pop("LD_PRELOAD", None)  # bug: "the launcher adds it" - it does not
        return env


class UnenforcedAscendLimiterAdapter(UnenforcedLimiterAdapter):
    """The same bug under the Ascend shim: the suite's ACL workload must catch it too."""

    limiter_shim = "libhami_ascend.so"


class UnenforcedCambriconLimiterAdapter(UnenforcedLimiterAdapter):
    """The same bug under the Cambricon shim: the suite's CNRT workload must catch it too."""

    limiter_shim = "libhami_cambricon.so"


# -- 8. self-agreement: numbers devices from 1, and its own id helper agrees --------------


class OneBasedIdsAdapter(PlainAdapter):
    """Numbers devices from 1, as the vendor's management tool does (the runtime counts from 0)."""

    def visible_device_id(self, grant: Grant) -> str:
        return grant.partition_uuid or str(grant.index + 1)


# -- 9. restart: the driver has no serials, so uuids are minted - and kept in memory -----


class MintedUuidAdapter(PlainAdapter):
    """Mints a uuid per device on first discovery and remembers it only in this instance."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._serials: dict[int, str] = {}

    def device_uuid(self, index: int) -> str:
        return self._serials.setdefault(index, f"PLAIN-{uuid_module.uuid4().hex[:12]}")


# -- 10. restart: partition ids from a counter this instance keeps -------------------------


class CountedPartitionIdAdapter(PlainAdapter):
    """Names each partition it carves "<device>/part-<n>" with n from an in-memory counter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._carved = itertools.count()
        self._lock = threading.Lock()

    def prepare(self, grants: list[Grant]) -> list[Grant]:
        out = []
        for grant in grants:
            if grant.partition:
                with self._lock:
                    grant = grant.model_copy(update={"partition_uuid": f"{grant.uuid}/part-{next(self._carved)}"})
            out.append(grant)
        return out


# -- 11. release order: tears down the newest partition of the device ---------------------


class NewestFirstTeardownAdapter(PlainAdapter):
    """Carves partitions in its (simulated) driver and, on release, destroys the device's newest one:
    right when releases come last-in-first-out, wrong otherwise."""

    driver: ClassVar[dict[str, list[str]]] = {}
    """device uuid -> partition ids, oldest first: the hardware, which outlives adapter instances."""
    _ids = itertools.count()
    _lock = threading.Lock()

    def prepare(self, grants: list[Grant]) -> list[Grant]:
        out = []
        with self._lock:
            for grant in grants:
                if grant.partition:
                    made = f"{grant.uuid}/p{next(self._ids)}"
                    self.driver.setdefault(grant.uuid, []).append(made)
                    grant = grant.model_copy(update={"partition_uuid": made})
                out.append(grant)
        return out

    def teardown(self, grants: list[Grant]) -> None:
        with self._lock:
            for grant in grants:
                carved = self.driver.get(grant.uuid)
                if grant.partition_uuid and carved:
                    carved.pop()  # bug: the newest, not grant.partition_uuid

    def reported(self, device: Device) -> list[str]:
        """What the driver says exists on the device (the suite's ground truth)."""
        with self._lock:
            return list(self.driver.get(device.uuid, []))

    def conformance_profile(self) -> Profile:
        return profile(devices=self.devices, hardware_partitions=self.reported)


# -- 12. loose partitions: "auto" carves an exact fit, a dynamic profile it does not declare --


class ExactFitAutoAdapter(PlainAdapter):
    """For ``partition: auto`` carves a partition of exactly the size asked, outside the catalog."""

    def plan_grant(
        self, info: DeviceInfo, part: RequestPart, part_index: int, usage: DeviceUsage
    ) -> Grant | ReasonCode:
        if part.partition != "auto" or not info.partitions:
            return super().plan_grant(info, part, part_index, usage)
        memory = part.memory_for(info.memory_mib)
        if usage.memory_mib + memory > info.memory_mib:
            return ReasonCode.CARD_INSUFFICIENT_MEMORY
        return Grant.on(info, part_index, memory, part.cores, partition=f"carved-{memory}m")


# -- 13. "partitions" declared, but DeviceInfo carries no catalog -------------------------


class UncataloguedAdapter(PlainAdapter):
    """Knows its profiles in partition_catalog() but builds DeviceInfo without them (no complete_info)."""

    def simulate(self, infos: Sequence[DeviceInfo], ledger: Ledger) -> list[Device]:
        return [self.device_class(info, self, ledger) for info in infos]


# -- 14. declares compute-limit, but its harness cannot show it -----------------------------


class UnprovenComputeLimitAdapter(PlainAdapter):
    """Preloads the CUDA shim and declares compute-limit; its harness implements only 'alloc'."""

    capabilities = PlainAdapter.capabilities | {Capability.MEMORY_LIMIT, Capability.COMPUTE_LIMIT}
    limiter_shim = "libhami_cuda.so"

    def conformance_profile(self) -> Profile:
        harness = WorkloadProgram(
            argv=(sys.executable, "-m", "hami_conformance.workloads.cuda"),
            env={
                "HAMI_CONFORMANCE_LIBCUDA": str(fake_library("libcuda.so.1")),
                "HAMI_FAKE_GPU_STATE": "{tmp}/fake-gpu.state",
                "HAMI_FAKE_MEMORY_MIB": str(1 << 20),
            },
            compute=False,
        )
        return profile(devices=self.devices, workload=harness)


BROKEN: dict[str, tuple[str, str]] = {
    "OverAllocatingAdapter": ("alloc.over-capacity-refused", "over-allocates"),
    "DoubleFreeAdapter": ("release.double-raises", "double-frees"),
    "LeakyAdapter": ("multi.all-or-nothing", "leaks on a failed multi-device request"),
    "ZeroMetricAdapter": ("monitor.not-available-not-zero", "reports 0 for a missing metric"),
    "RacyAdapter": ("concurrency.threads", "is not thread-safe"),
    "OverlappingPartitionAdapter": ("partition.no-overlap", "grants an overlapping partition"),
    "UnenforcedLimiterAdapter": ("limiter.memory-enforced", "does not preload its limiter"),
    "UnenforcedAscendLimiterAdapter": ("limiter.memory-enforced", "does not preload its Ascend limiter"),
    "UnenforcedCambriconLimiterAdapter": ("limiter.memory-enforced", "does not preload its Cambricon limiter"),
    # The suite before issue 17 certified each of these (see test_conformance_teeth.py):
    "OneBasedIdsAdapter": ("env.visible-devices", "names devices by a one-based index its own helper agrees with"),
    "MintedUuidAdapter": ("restart.same-devices", "mints device uuids that do not survive a restart"),
    "CountedPartitionIdAdapter": ("restart.ledger-honoured", "reissues partition ids after a restart"),
    "NewestFirstTeardownAdapter": ("release.any-order", "tears down the wrong partition unless released LIFO"),
    "ExactFitAutoAdapter": ("partition.granted-from-catalog", "carves undeclared dynamic profiles"),
    "UncataloguedAdapter": ("partition.catalog", "declares partitions but DeviceInfo carries no catalog"),
    "UnprovenComputeLimitAdapter": ("limiter.compute-share", "declares compute-limit its harness cannot prove"),
}
"""Broken adapter class -> (the check that must fail, its bug)."""

NEW_TEETH = (
    "OneBasedIdsAdapter",
    "MintedUuidAdapter",
    "CountedPartitionIdAdapter",
    "NewestFirstTeardownAdapter",
    "ExactFitAutoAdapter",
    "UncataloguedAdapter",
    "UnprovenComputeLimitAdapter",
)
"""The broken adapters the suite before issue 17 certified (all MUST checks passed)."""


# -- 15. right on simulated devices, wrong on hardware: never destroys its MIG instances ----


class MigLeakingAdapter(NvidiaAdapter):
    """The NVIDIA adapter, but teardown leaves MIG instances behind ("a GPU reset cleans them up").

    On simulated devices nothing is created, so only a run on the (fake) hardware library shows it."""

    def teardown(self, grants: list[Grant]) -> None:
        return None


HARDWARE_BROKEN: dict[str, tuple[str, str]] = {
    "MigLeakingAdapter": ("release.any-order", "leaks the MIG instances it creates"),
}
"""Broken adapters only a run on the fake vendor libraries catches -> (the check that must fail, its bug)."""


# -- issue 40: bug classes the suite before it certified -------------------------------------
# Each is refused by the one check named for its class; the tests run that check alone
# (test_conformance_classes.py), so the whole suite is not run once per adapter.


class MisspeltShimAdapter(PlainAdapter):
    """Declares a memory limiter whose shim name has a typo: every allocation would fail alike."""

    capabilities = PlainAdapter.capabilities | {Capability.MEMORY_LIMIT}
    limiter_shim = "libhami_cudaa.so"


class OverpromisedCatalogAdapter(PlainAdapter):
    """Adds a profile of 13 % cores with 8 instances: 104 % of the device, so the 8th is never placed."""

    def partition_catalog(self, model: str) -> list[PartitionProfile]:
        profiles = super().partition_catalog(model)
        if not profiles:
            return profiles
        return [*profiles, PartitionProfile(name="eighth", memory_mib=1024, cores=13, max_instances=8)]


class LibraryPartitionsAdapter(PlainAdapter):
    """Correct: carves partitions in its (simulated) vendor library on the devices that library knows -
    its profile's devices - and its reader answers None ("not this device") for any other one, such as
    the devices of an inventory."""

    library: ClassVar[dict[str, list[str]]] = {}
    """device uuid -> partition ids: the vendor library's state, which outlives adapter instances."""
    _ids = itertools.count()
    _lock = threading.Lock()

    def traits_for(self, model: str) -> DeviceTraits | None:
        return traits(model) if model in MODELS else None

    def devices(self, ledger: Ledger) -> list[Device]:
        devices = super().devices(ledger)
        with self._lock:
            for device in devices:
                self.library.setdefault(device.uuid, [])
        return devices

    def prepare(self, grants: list[Grant]) -> list[Grant]:
        out = []
        with self._lock:
            for grant in grants:
                if grant.partition and grant.uuid in self.library:
                    made = f"{grant.uuid}/p{next(self._ids)}"
                    self.library[grant.uuid].append(made)
                    grant = grant.model_copy(update={"partition_uuid": made})
                out.append(grant)
        return out

    def teardown(self, grants: list[Grant]) -> None:
        with self._lock:
            for grant in grants:
                carved = self.library.get(grant.uuid, [])
                if grant.partition_uuid in carved:
                    carved.remove(grant.partition_uuid)

    def reported(self, device: Device) -> list[str] | None:
        with self._lock:
            carved = self.library.get(device.uuid)
            return None if carved is None else list(carved)

    def conformance_profile(self) -> Profile:
        return profile(devices=self.devices, hardware_partitions=self.reported)


class ExplodingReadDevice(PlainDevice):
    def read(self) -> DeviceReadings:
        raise RuntimeError("the vendor library's handle went stale")


class ExplodingReadAdapter(PlainAdapter):
    """Its readings raise an exception that is no HamiError: the report shows where, without pytest's frames."""

    device_class = ExplodingReadDevice


class AutoByMemoryAdapter(PlainAdapter):
    """For ``partition: auto`` picks the smallest profile with enough memory, whatever cores were asked."""

    def choose_profile(
        self, info: DeviceInfo, part: RequestPart, memory_mib: int, usage: DeviceUsage
    ) -> PartitionProfile | None:
        if part.partition != "auto":
            return super().choose_profile(info, part, memory_mib, usage)
        fitting = [p for p in info.partitions if p.memory_mib >= memory_mib]
        return min(fitting, key=lambda p: p.memory_mib, default=None)


class NamedRoundsUpAdapter(PlainAdapter):
    """When the named profile is too small for the request, "helpfully" grants the next larger one."""

    def choose_profile(
        self, info: DeviceInfo, part: RequestPart, memory_mib: int, usage: DeviceUsage
    ) -> PartitionProfile | None:
        chosen = super().choose_profile(info, part, memory_mib, usage)
        if chosen is None and part.partition not in (None, "auto"):
            auto = part.model_copy(update={"partition": "auto"})
            return super().choose_profile(info, auto, memory_mib, usage)
        return chosen


class NamedGrantsLessAdapter(PlainAdapter):
    """A named profile is granted whatever memory or cores the request asks (the name alone decides)."""

    def choose_profile(
        self, info: DeviceInfo, part: RequestPart, memory_mib: int, usage: DeviceUsage
    ) -> PartitionProfile | None:
        if part.partition not in (None, "auto"):
            part, memory_mib = part.model_copy(update={"cores": 0}), 0
        return super().choose_profile(info, part, memory_mib, usage)


class AuditingReleaseDevice(PlainDevice):
    def release(self, handle: DeviceHandle | str, *, force: bool = False) -> None:
        adapter = self.adapter
        assert isinstance(adapter, AuditingReleaseAdapter)
        adapter.audit.append(handle if isinstance(handle, str) else handle.id)  # bug: before the SDK checks it
        super().release(handle, force=force)


class AuditingReleaseAdapter(PlainAdapter):
    """Logs each release for the vendor's audit trail, reading ``handle.id`` of whatever it was given."""

    device_class = AuditingReleaseDevice

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.audit: list[str] = []


class ProfileLookupAdapter(PlainAdapter):
    """Looks a named profile up in a dict: an unknown name raises KeyError instead of a refusal."""

    def choose_profile(
        self, info: DeviceInfo, part: RequestPart, memory_mib: int, usage: DeviceUsage
    ) -> PartitionProfile | None:
        if part.partition in (None, "auto"):
            return super().choose_profile(info, part, memory_mib, usage)
        chosen = {p.name: p for p in info.partitions}[part.partition]
        return chosen if usage.partitions.count(chosen.name) < chosen.max_instances else None


class RefilledListAdapter(PlainAdapter):
    """Keeps the devices it found in one list, refilled in place by each discovery (to "reuse the objects")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._found: list[Device] = []

    def devices(self, ledger: Ledger) -> list[Device]:
        fresh = super().devices(ledger)
        self._found.clear()
        for device in fresh:
            time.sleep(0.001)  # one library call per device
            self._found.append(device)
        return self._found  # bug: the list another discovery is refilling


class CurrentDeviceDevice(PlainDevice):
    def read(self) -> DeviceReadings:
        adapter = self.adapter
        assert isinstance(adapter, CurrentDeviceAdapter)
        adapter.current = self.info.index  # like the vendor library's set-device call ...
        time.sleep(0.001)
        index = adapter.current  # ... and readings of whichever device is current now
        return DeviceReadings(health=self.info.health, temperature_c=40.0 + index)


class CurrentDeviceAdapter(PlainAdapter):
    """Reads a device by first selecting it in library-wide state, without a lock."""

    device_class = CurrentDeviceDevice

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.current = 0


class FakeLibrary:
    """A vendor library's view of the devices, with the suite's fault injector (Profile.faults)."""

    def __init__(self) -> None:
        self.unhealthy_: set[str] = set()
        self.gone: set[str] = set()
        self.failing: set[str] = set()

    def health(self, uuid: str) -> Health:
        if uuid in self.failing or uuid in self.gone:
            raise OSError(f"library call about {uuid} failed")  # what a raw binding raises
        return Health.UNHEALTHY if uuid in self.unhealthy_ else Health.HEALTHY

    def temperature(self, uuid: str) -> float:
        """Each device runs at its own temperature (its last digit's worth above 30 C)."""
        return 30.0 + int(uuid[-1])

    def facts(self, device: Device) -> dict[str, object]:
        """The library's own state, as Profile.facts: what monitor() must read for the device."""
        return {"temperature_c": self.temperature(device.uuid)}

    # -- FaultInjector ----------------------------------------------------------------
    def unhealthy(self, device: Device) -> None:
        self.unhealthy_.add(device.uuid)

    def disappear(self, device: Device) -> None:
        self.gone.add(device.uuid)

    def fail_calls(self, device: Device) -> None:
        self.failing.add(device.uuid)

    def clear(self) -> None:
        self.unhealthy_.clear()
        self.gone.clear()
        self.failing.clear()


class LibraryDevice(PlainDevice):
    """Health from the library on every reading; a failed call is reported as a typed error, a lost
    device as unhealthy."""

    def read(self) -> DeviceReadings:
        adapter = self.adapter
        assert isinstance(adapter, FaultAwareAdapter)
        if self.uuid in adapter.library.gone:
            return DeviceReadings(health=Health.UNHEALTHY)
        try:
            health = adapter.library.health(self.uuid)
            return DeviceReadings(health=health, temperature_c=adapter.library.temperature(self.uuid))
        except OSError as exc:
            raise VendorLibraryError(VENDOR, "health", None, str(exc)) from exc


class FaultAwareAdapter(PlainAdapter):
    """The control of faults.during-run: correct under every fault its library's injector makes."""

    device_class: ClassVar[type[Device]] = LibraryDevice

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.library = FakeLibrary()

    def devices(self, ledger: Ledger) -> list[Device]:
        devices = super().devices(ledger)
        return [d for d in devices if d.uuid not in self.library.gone]

    def conformance_profile(self) -> Profile:
        return profile(devices=self.devices, faults=self.library, facts=self.library.facts)


class StaleHealthDevice(LibraryDevice):
    def read(self) -> DeviceReadings:
        return DeviceReadings(health=self.info.health)  # bug: health as discovery saw it


class StaleHealthAdapter(FaultAwareAdapter):
    """Reports the health discovery read, never the library's current one."""

    device_class = StaleHealthDevice


class RawErrorDevice(LibraryDevice):
    def read(self) -> DeviceReadings:
        adapter = self.adapter
        assert isinstance(adapter, FaultAwareAdapter)
        return DeviceReadings(health=adapter.library.health(self.uuid))  # bug: the binding's OSError escapes


class RawErrorAdapter(FaultAwareAdapter):
    """Lets the binding's raw exception out of read() when a library call fails."""

    device_class = RawErrorDevice


class PerModelCacheDevice(LibraryDevice):
    def read(self) -> DeviceReadings:
        adapter = self.adapter
        assert isinstance(adapter, PerModelCacheAdapter)
        cached = adapter.cache.get(self.info.model)
        if cached is None:  # bug: "identical devices read the same", so one library call per model
            cached = adapter.cache[self.info.model] = super().read()
        return cached


class PerModelCacheAdapter(FaultAwareAdapter):
    """Caches readings per model to spare library calls: right only while identical devices agree."""

    device_class = PerModelCacheDevice

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cache: dict[str, DeviceReadings] = {}


class FirstOfModelNvidiaAdapter(NvidiaAdapter):
    """The NVIDIA adapter, reading every device of a model through the first one's NVML handle."""

    def discover(self, ledger: Ledger) -> list[Device]:
        devices = super().discover(ledger)
        first: dict[str, Device] = {}
        for device in devices:
            setattr(device, "read", first.setdefault(device.info.model, device).read)  # noqa: B010
        return devices


class MegabyteAdapter(PlainAdapter):
    """Reports memory in MB (10^6 bytes) where the contract says MiB: 4.9 % more than the device has."""

    def simulate(self, infos: Sequence[DeviceInfo], ledger: Ledger) -> list[Device]:
        slipped = [i.model_copy(update={"memory_mib": i.memory_mib * (1 << 20) // 10**6}) for i in infos]
        return super().simulate(slipped, ledger)


class VnpuLeakingAdapter(AscendAdapter):
    """The Ascend adapter, but teardown leaves the vNPUs it made: only the fake DCMI's state file shows it."""

    def teardown(self, grants: list[Grant]) -> None:
        return None


class SmluLeakingAdapter(CambriconAdapter):
    """The Cambricon adapter, but teardown leaves the sMLU instances it made: only the fake CNDev's state
    file shows it."""

    def teardown(self, grants: list[Grant]) -> None:
        return None


CLASSES: dict[str, tuple[str, str]] = {
    "MisspeltShimAdapter": ("identity.adapter", "names a limiter shim that is not built"),
    "OverpromisedCatalogAdapter": ("partition.catalog", "promises more partition instances than the device holds"),
    "AutoByMemoryAdapter": ("partition.each-dimension", "rounds 'auto' onto a profile by memory alone"),
    "NamedRoundsUpAdapter": ("partition.each-dimension", "grants a larger profile than the one named"),
    "NamedGrantsLessAdapter": ("partition.named-covers", "grants a named profile smaller than the request"),
    "AuditingReleaseAdapter": ("badinput.every-verb", "raises AttributeError on a release of a non-handle"),
    "ProfileLookupAdapter": ("badinput.every-verb", "raises KeyError for an unknown partition profile"),
    "RefilledListAdapter": ("concurrency.every-verb", "returns a device list another discovery refills"),
    "CurrentDeviceAdapter": ("concurrency.every-verb", "reads whichever device another thread selected"),
    "StaleHealthAdapter": ("faults.during-run", "reports the health discovery saw, never a change"),
    "RawErrorAdapter": ("faults.during-run", "lets a failed library call escape as a raw OSError"),
    "PerModelCacheAdapter": ("monitor.per-device", "caches readings per model"),
    "MegabyteAdapter": ("identity.spec-sheet", "reports memory in MB as MiB"),
}
"""Issue 40's broken adapters -> (the one check that must refuse it, its bug); a SHOULD check's failure is
reported, not fatal."""
