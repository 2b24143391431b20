"""The Example Accelerator adapter: the whole contract a vendor plugin implements.

* ``name``, ``version``, ``capabilities``, ``visible_devices_env``: class attributes.
* ``probe()``: is the vendor library here?  Never raises; says why not.
* ``discover(ledger)``: the devices, through the vendor library.
* ``simulate(infos, ledger)``: the same devices with no hardware behind them.
* ``partition_catalog(model)``: the partition profiles (only with Capability.PARTITIONS).
* ``limiter_shim``: the LD_PRELOAD shim this package builds (only with Capability.MEMORY_LIMIT).
* ``conformance_profile()``: optional; tells the conformance suite how to run without hardware
  and how to drive the runtime under the limiter.

Accounting (capacity, exclusivity, split count, all-or-nothing) is the SDK's:
the adapter never re-implements allocate or release.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from hami_conformance import Profile, WorkloadProgram

from hami_devices.errors import VendorLibraryError
from hami_devices.models import NOT_AVAILABLE, DeviceTraits, Interconnect, PartitionProfile
from hami_devices.plugin import Capability, Device, DeviceInfo, DeviceReadings, Health, Ledger, Probe, VendorAdapter
from hami_example_accel import driver

VENDOR = "example"

# The core traits catalog does not know this vendor, so the plugin brings its own spec sheets.
TRAITS: dict[str, DeviceTraits] = {
    "EX-1": DeviceTraits(
        vendor=VENDOR,
        model="EX-1",
        generation="ex-gen1",
        year=2025,
        memory_mib=32768,
        memory_bandwidth_gbps=900.0,
        peak_tflops={"fp32": 30.0, "bf16": 120.0, "fp16": 120.0, "int8": 240.0},
        interconnect=Interconnect(kind="pcie", bandwidth_gbps=64.0),
        tdp_watts=150.0,
        relative_cost=0.35,
    ),
    "EX-2": DeviceTraits(
        vendor=VENDOR,
        model="EX-2",
        generation="ex-gen2",
        year=2026,
        memory_mib=65536,
        memory_bandwidth_gbps=2000.0,
        peak_tflops={"fp32": 60.0, "bf16": 400.0, "fp16": 400.0, "fp8": 800.0, "int8": 800.0},
        interconnect=Interconnect(kind="exlink", bandwidth_gbps=400.0),
        tdp_watts=300.0,
        relative_cost=0.8,
    ),
}

UUID_PREFIX = "EXA-"
"""A device's uuid is this and the driver's serial."""

SIMULATED_DEVICES = 4
"""How many devices the suite gets when no driver is installed (conformance_profile)."""

LIBS = driver.LIBS
library = driver.library


class ExampleDevice(Device):
    """One Example Accelerator: readings from the driver, "n/a" for what it cannot measure."""

    def read(self) -> DeviceReadings:
        usage = self.usage()
        load = float(min(100, usage.cores))
        return DeviceReadings(
            memory_used_mib=NOT_AVAILABLE,  # the driver has no memory counters
            utilization_pct=NOT_AVAILABLE,  # ... nor utilization
            temperature_c=driver.temperature_c(self.info.index, load),
            power_w=driver.power_w(self.info.model, load),
            health=self._health(),
        )

    def _health(self) -> Health:
        """Asked of the driver at every reading; a device it knows nothing of (one from an inventory)
        keeps the health it was given."""
        if self.info.attributes.get("driver") != "simulated":
            return self.info.health
        try:
            return Health.HEALTHY if driver.healthy(self.info.index) else Health.UNHEALTHY
        except driver.DriverError as exc:
            if exc.code == driver.ERROR_GONE:
                return Health.UNHEALTHY  # fell off the bus: never granted again until it is back
            raise VendorLibraryError(VENDOR, exc.function, exc.code, str(exc)) from exc


class ExampleFaults:
    """The conformance suite's fault injector (``Profile.faults``): faults made in the Example Runtime
    through its fault hook, the control file named by ``EXRT_FAULTS`` (native/exrt.h).

    The file is replaced, never edited in place, so the runtime sees a new inode even within one tick
    of the file system's clock; the variable is set only while a fault stands, so workload processes
    started by other checks run without one.
    """

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._folder: Path | None = None

    def unhealthy(self, device: Device) -> None:
        self._add(f"unhealthy {device.info.index}")

    def disappear(self, device: Device) -> None:
        self._add(f"lost {device.info.index}")

    def fail_calls(self, device: Device) -> None:
        self._add(f"error {device.info.index}")

    def clear(self) -> None:
        self._lines.clear()
        os.environ.pop(driver.FAULTS_ENV, None)
        if self._folder is not None:
            self._write()

    def _add(self, line: str) -> None:
        self._lines.append(line)
        os.environ[driver.FAULTS_ENV] = str(self._write())  # the runtime reads it on every call

    def _write(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="exrt-faults-"))
        path = self._folder / "faults"
        staged = self._folder / "faults.new"
        staged.write_text("".join(f"{line}\n" for line in self._lines))
        os.replace(staged, path)
        return path


class ExampleAdapter(VendorAdapter):
    name: ClassVar[str] = VENDOR
    display_name: ClassVar[str] = "Example Accelerator"
    version: ClassVar[str] = "1.0.0"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.SIMULATED,
            Capability.PARTITIONS,
            Capability.TOPOLOGY,
            Capability.HEALTH_EVENTS,
            Capability.MEMORY_LIMIT,  # proven by the suite with this package's own shim and harness
        }
    )
    visible_devices_env: ClassVar[tuple[str, ...]] = ("EXAMPLE_VISIBLE_DEVICES",)
    # "package:path": a shim inside this package (built by its pip install), not one of hami-devices'
    limiter_shim: ClassVar[str | None] = f"hami_example_accel:{LIBS}/libhami_example.so"

    # -- hardware back end ---------------------------------------------------------
    def probe(self) -> Probe:
        count = driver.device_count()
        if count is None:
            return Probe(False, f"example driver not installed (set {driver.DEVICES_ENV}=N to simulate N devices)")
        if not library("libexrt.so").is_file():
            return Probe(False, f"the Example Runtime is not built ({library('libexrt.so')}): pip install this package")
        return Probe(True, f"example driver reports {count} device(s)", library="simulated")

    def discover(self, ledger: Ledger) -> list[Device]:
        return self._devices(driver.device_count() or 0, ledger)

    # -- simulated back end ----------------------------------------------------------
    def simulate(self, infos: Sequence[DeviceInfo], ledger: Ledger) -> list[Device]:
        return [ExampleDevice(self.complete_info(info), self, ledger) for info in infos]

    def traits_for(self, model: str) -> DeviceTraits | None:
        """Lets inventories name EX-1 / EX-2, which the core catalog does not know."""
        return TRAITS.get(model)

    def complete_info(self, info: DeviceInfo) -> DeviceInfo:
        if info.traits is None and info.model in TRAITS:
            info = info.model_copy(update={"traits": TRAITS[info.model]})
        return super().complete_info(info)

    def _devices(self, count: int, ledger: Ledger) -> list[Device]:
        raws = driver.enumerate_devices(count)
        infos = []
        for raw in raws:
            uuid = f"{UUID_PREFIX}{raw.serial}"
            infos.append(
                DeviceInfo(
                    uuid=uuid,
                    index=raw.index,
                    vendor=VENDOR,
                    model=raw.model,
                    memory_mib=raw.memory_mib,
                    health=Health.HEALTHY if raw.healthy else Health.UNHEALTHY,
                    split_count=self.config.device_plugin.split_count,
                    native_compute_units={"tiles": 8},
                    topology={
                        f"{UUID_PREFIX}{other.serial}": 100 if other.model == raw.model == "EX-2" else 40
                        for other in raws
                        if other.index != raw.index
                    },
                    attributes={"driver": "simulated"},
                )
            )
        return self.simulate(infos, ledger)

    # -- sharing model -----------------------------------------------------------------
    def partition_catalog(self, model: str) -> list[PartitionProfile]:
        """Tiles: a quarter (2 tiles), a half (4) or the whole device (8)."""
        memory = TRAITS[model].memory_mib if model in TRAITS else 0
        if not memory:
            return []
        return [
            PartitionProfile(name="ex.2t", memory_mib=memory // 4, cores=25, native={"tiles": 2}, max_instances=4),
            PartitionProfile(name="ex.4t", memory_mib=memory // 2, cores=50, native={"tiles": 4}, max_instances=2),
            PartitionProfile(name="ex.8t", memory_mib=memory, cores=100, native={"tiles": 8}, max_instances=1),
        ]

    # -- conformance -------------------------------------------------------------------------
    def conformance_profile(self) -> Profile:
        """Without a driver the suite certifies SIMULATED_DEVICES simulated devices; the limiter checks
        run hami_example_accel.workload against the Example Runtime this package built."""
        workload = WorkloadProgram(
            argv=(sys.executable, "-m", "hami_example_accel.workload"),
            env={"HAMI_EXAMPLE_RUNTIME": str(library("libexrt.so"))},
            compute=False,  # COMPUTE_LIMIT is not declared: the shim does not throttle launches
        )
        return Profile(
            devices=lambda ledger: self._devices(SIMULATED_DEVICES, ledger), workload=workload, faults=ExampleFaults()
        )
