"""What an adapter may tell the suite beyond the VendorAdapter interface.

An adapter opts in by defining ``conformance_profile(self) -> Profile``.  Every
field is optional; the suite falls back to its own defaults (hardware when the
probe says it is present, a shipped inventory for the built-in vendors).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from hami_devices.device import Device
    from hami_devices.ledger import Ledger


PartitionReader = Callable[["Device"], "Collection[str] | None"]
"""Reads the partition ids the vendor library reports on a device; None: the library does not know it."""


class FaultInjector(Protocol):
    """Faults made in the vendor library (or its fake) while the suite runs, for ``faults.during-run``.

    Each call takes effect at once for every later library call, in this process, about the device
    the adapter built as ``device``; ``clear`` undoes them all (the suite calls it after every check).
    """

    def unhealthy(self, device: Device) -> None:
        """The library reports the device's health as bad (an XID storm, an ECC error)."""

    def disappear(self, device: Device) -> None:
        """The library no longer enumerates the device, and calls about it fail (fell off the bus)."""

    def fail_calls(self, device: Device) -> None:
        """Every library call about the device returns an error (a hung or restarting driver)."""

    def clear(self) -> None:
        """Every device as it was."""


@dataclass(frozen=True)
class WorkloadProgram:
    """A small program that exercises the vendor runtime under an allocation's environment.

    The suite runs ``[*argv, OPERATION, ARG]`` with the allocation's environment
    plus ``env`` (for example the path of a fake runtime library), so the
    limiter shim is preloaded exactly as in production.  Operations:

    ``alloc MIB``
        allocate MIB of device memory on the first visible device and hold it;
        exit 0 when the runtime granted it, exit 2 when the runtime returned its
        out-of-memory error, anything else is a harness error.
    ``compute SECONDS``
        launch kernels back to back on the first visible device for SECONDS of
        wall time and print one JSON line ``{"utilization_pct": <float>}``: the
        share of wall time the device spent running this process's kernels.
    """

    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to the allocation's environment; ``{tmp}`` in a value becomes a fresh folder per check."""
    timeout_s: float = 30.0
    compute: bool = True
    """Whether the program implements ``compute`` (the memory check needs only ``alloc``)."""


@dataclass(frozen=True)
class Profile:
    """Optional facts an adapter gives the suite."""

    inventory: str | Path | None = None
    """Inventory YAML for the simulated back end when no hardware is present."""

    devices: Callable[[Ledger], list[Device]] | None = None
    """Builds simulated devices on a fresh ledger (for vendors the core traits catalog does not know)."""

    workload: WorkloadProgram | None = None
    """How the limiter checks run a workload process.  Without it (and without a harness the suite
    ships for the adapter's runtime) a declared memory-limit or compute-limit fails: it cannot be proven."""

    hardware_partitions: PartitionReader | None = None
    """The ids of the partitions the vendor library reports on a device right now, read from the
    library (not from the ledger).  A grant matches a reported id when its ``partition_uuid`` is that
    id, or that id followed by ``#`` and adapter-private detail.  The release checks compare it with
    the live grants after every release; without it they compare the ledger, monitor() and regions.
    Return None for a device the library does not know (one built from an inventory or simulated):
    that device is not compared.  On ``--inventory`` devices the suite never asks."""

    facts: Callable[[Device], Mapping[str, object] | None] | None = None
    """A device's readings as the vendor library's own state states them - its state files, its
    tool's output, never the adapter's objects: Metrics field names (``memory_used_mib``,
    ``utilization_pct``, ``temperature_c``, ``power_w``, ``health``) to values; None for a device it
    does not know.  ``monitor.per-device`` compares each device's monitor() with it."""

    faults: FaultInjector | None = None
    """Injects faults into the vendor library during the run (``faults.during-run``); without it
    that check is N/A with the reason."""

    notes: Sequence[str] = ()
