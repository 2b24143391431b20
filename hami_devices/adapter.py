"""The VendorAdapter interface: one per vendor, loaded from ``hami_devices.vendors``.

An adapter knows its hardware library (probe + discover), its sharing model
(partition catalog and how a request is rounded onto it), and the
environment its runtime expects.  The accounting itself is the core's, so
every vendor enforces the same rules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from hami_devices import accounting, rounding
from hami_devices import traits as traits_catalog
from hami_devices.accounting import DeviceUsage
from hami_devices.config import HamiConfig
from hami_devices.device import Device
from hami_devices.errors import ReasonCode
from hami_devices.isolation import limiter_environment
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceInfo, DeviceTraits, Grant, PartitionProfile, RequestPart
from hami_devices.simulated import SimulatedDevice


class Capability(StrEnum):
    """What an adapter supports; the conformance suite reports undeclared ones as not applicable."""

    PARTITIONS = "partitions"
    DYNAMIC_PROFILES = "dynamic-profiles"
    """Partitions may be carved to sizes outside the catalog (sMLU): without it every
    partition granted must be one of the device's catalog profiles."""
    MEMORY_LIMIT = "memory-limit"
    COMPUTE_LIMIT = "compute-limit"
    TOPOLOGY = "topology"
    HEALTH_EVENTS = "health-events"
    PROCESS_MONITORING = "process-monitoring"
    SIMULATED = "simulated"


@dataclass(frozen=True)
class Probe:
    """Whether the adapter's hardware library is usable here, and why not."""

    available: bool
    detail: str
    library: str | None = None


class VendorAdapter(ABC):
    """One vendor: what a plugin implements, loaded from the ``hami_devices.vendors`` entry point.

    A subclass sets the class attributes (``name``, ``capabilities``, ``visible_devices_env``,
    ``limiter_shim``, ``library_env``, ``device_nodes``) and implements ``probe`` and ``discover``; the other
    methods have defaults a vendor overrides where its hardware differs: ``partition_catalog`` and
    ``plan_grant`` (how a request part is rounded onto a device: MIG profiles, vNPU templates, sMLU units),
    ``prepare``/``teardown`` (creating and removing partitions), ``environment`` (what the workload process
    gets), ``pair_score`` (topology). ``simulate`` serves the same adapter on an inventory, with no hardware.

    Args:
        config: the configuration in effect; the defaults when omitted.

    Example:
        ```python
        class ExampleAdapter(VendorAdapter):
            name = "example"
            capabilities = frozenset({Capability.SIMULATED, Capability.MEMORY_LIMIT})
            visible_devices_env = ("EXAMPLE_VISIBLE_DEVICES",)

            def probe(self) -> Probe: ...
            def discover(self, ledger: Ledger) -> list[Device]: ...
        ```

    ``hami-devices conformance NAME`` certifies that an adapter keeps this contract; a plugin that fails to
    load is reported by name (``hami-devices vendors``) without taking the other vendors down.
    """

    name: ClassVar[str]
    display_name: ClassVar[str] = ""
    version: ClassVar[str] = "0.1.0"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.SIMULATED})
    visible_devices_env: ClassVar[tuple[str, ...]] = ()
    limiter_shim: ClassVar[str | None] = None
    """The LD_PRELOAD shim: a file name shipped with hami-devices (``libhami_cuda.so``), or
    ``"package:path/in/package.so"`` for a shim a plugin ships inside its own package."""
    library_env: ClassVar[str | None] = None
    """The variable naming a vendor management library to load instead of the system's
    (``HAMI_NVML_LIBRARY``); ``hami-devices doctor`` says when the file it names is unusable."""
    device_nodes: ClassVar[tuple[str, ...]] = ()
    """Glob patterns, under ``/dev``, of the device nodes a workload of this vendor opens
    (``nvidia[0-9]*``); ``hami-devices doctor`` checks they are there and accessible."""

    def __init__(self, config: HamiConfig | None = None) -> None:
        self.config = config or HamiConfig()

    # -- hardware back end -------------------------------------------------
    @abstractmethod
    def probe(self) -> Probe:
        """Find the vendor library without raising; say why it is unusable."""

    @abstractmethod
    def discover(self, ledger: Ledger) -> list[Device]:
        """The physical devices on this node, through the vendor library."""

    def driver_agreement(self) -> tuple[bool, str] | None:
        """Whether the vendor library and the driver under it are the same release, where knowable.

        ``(agrees, one line saying what was compared)``, or None when this node cannot tell (the
        default).  ``hami-devices doctor`` reports it; it must not raise.
        """
        return None

    # -- facts -------------------------------------------------------------
    def traits_for(self, model: str) -> DeviceTraits | None:
        """Spec-sheet traits of one of this vendor's models.

        The shipped catalog by default; a third-party vendor the catalog does not
        know overrides this to bring its own, so inventories can name its models.
        """
        return traits_catalog.find(self.name, model)

    # -- simulated back end ------------------------------------------------
    def simulate(self, infos: Sequence[DeviceInfo], ledger: Ledger) -> list[Device]:
        """Devices with no hardware behind them, for inventories and tests."""
        return [SimulatedDevice(self.complete_info(info), self, ledger) for info in infos]

    def complete_info(self, info: DeviceInfo) -> DeviceInfo:
        """Fill vendor facts an inventory leaves out (partition catalog, split count ...)."""
        if not info.partitions:
            profiles = self.partition_catalog(info.model)
            if profiles:
                info = info.model_copy(update={"partitions": profiles})
        return info

    # -- sharing model -----------------------------------------------------
    def partition_catalog(self, model: str) -> list[PartitionProfile]:
        """The partition profiles a model supports (empty: no hardware partitioning)."""
        return []

    def plan_grant(
        self, info: DeviceInfo, part: RequestPart, part_index: int, usage: DeviceUsage
    ) -> Grant | ReasonCode:
        """Round one part onto one device: a partition profile, or a plain share.

        The default picks the named profile, or the smallest that fits for
        ``partition: auto``; vendors override to add placement rules (and then
        say in ``plain_shares`` where their rule is the plain one).
        """
        profile = None
        if part.partition is not None:
            profile = self.choose_profile(info, part, rounding.wanted_memory(info, part), usage)
        return rounding.plan_share(info, part, part_index, profile)

    def choose_profile(
        self, info: DeviceInfo, part: RequestPart, memory_mib: int, usage: DeviceUsage
    ) -> PartitionProfile | None:
        return rounding.choose_profile(info.partitions or self.partition_catalog(info.model), part, memory_mib, usage)

    def plain_shares(self, info: DeviceInfo) -> bool:
        """True when ``plan_grant`` gives a part without a partition the plain share on ``info``, whatever the usage.

        The scheduling engine evaluates such devices over arrays and asks ``plan_grant``
        for every other one, so an adapter that overrides ``plan_grant`` is asked
        device by device unless it overrides this too.
        """
        return type(self).plan_grant is VendorAdapter.plan_grant

    @property
    def memory_factor(self) -> float:
        return accounting.memory_factor(self.config)

    @property
    def core_capacity(self) -> int:
        return accounting.core_capacity(self.config)

    # -- hardware side effects of an allocation ----------------------------
    def prepare(self, grants: list[Grant]) -> list[Grant]:
        """Create what the grants need on the hardware (MIG instances, vNPUs).

        Return the grants with vendor ids filled in.  Called inside the ledger
        transaction; raising aborts the allocation.
        """
        return grants

    def teardown(self, grants: list[Grant]) -> None:
        """Undo ``prepare``; must not raise for partitions that are already gone."""
        return None

    # -- workload environment ----------------------------------------------
    def visible_device_id(self, grant: Grant) -> str:
        return grant.partition_uuid or grant.uuid

    def environment(self, grants: list[Grant], region_path: str | None) -> dict[str, str]:
        """Variables the workload process needs: visible devices and limiter limits."""
        env: dict[str, str] = {}
        ids = ",".join(self.visible_device_id(g) for g in grants)
        for var in self.visible_devices_env:
            env[var] = ids
        env.update(limiter_environment(self, grants, region_path))
        return env

    def limiter_variables(self, position: int, grant: Grant) -> dict[str, str]:
        """Vendor-specific names for one device's limits (HAMI_* names are always set)."""
        return {}

    # -- containers (what the vendor's container toolkit would set up) ------
    def container_environment(self, grants: list[Grant]) -> dict[str, str]:
        """Variables read by the vendor's container runtime or toolkit (not by the workload), added to
        ``environment`` in a container's CDI edits."""
        return {}

    def container_device_nodes(self, grants: list[Grant]) -> list[tuple[str, str]]:
        """(path in the container, path on the host) of each device file a container using these grants
        needs, control devices included: the CDI ``deviceNodes`` of the claim."""
        return []

    # -- topology ------------------------------------------------------------
    def pair_score(self, a: DeviceInfo, b: DeviceInfo) -> int:
        """0..100: how well two devices of one node talk to each other."""
        return a.topology.get(b.uuid, 0)
