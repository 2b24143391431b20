"""The SDK's error hierarchy and the fixed reason codes for rejected devices.

Every error raised on purpose by the SDK derives from ``HamiError`` so that an
embedding scheduler can catch one type.  Reason codes are a closed enum (named
after HAMi's, e.g. ``CardInsufficientMemory``) because schedulers log, count
and alert on them; free text would break that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum


class ReasonCode(StrEnum):
    """Why one device (or node) was rejected for a request."""

    CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
    CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
    CARD_SPLIT_EXHAUSTED = "CardSplitCountExhausted"
    CARD_EXCLUSIVELY_HELD = "CardExclusivelyHeld"
    CARD_NOT_EMPTY_FOR_EXCLUSIVE = "CardNotEmptyForExclusive"
    CARD_UNHEALTHY = "CardUnhealthy"
    CARD_VENDOR_MISMATCH = "CardVendorMismatch"
    CARD_TYPE_MISMATCH = "CardTypeMismatch"
    CARD_UUID_MISMATCH = "CardUuidMismatch"
    CARD_PRECISION_UNSUPPORTED = "CardPrecisionUnsupported"
    CARD_PARTITION_UNAVAILABLE = "CardPartitionUnavailable"
    CARD_NUMA_MISMATCH = "CardNumaMismatch"
    CARD_ALREADY_IN_ALLOCATION = "CardAlreadyInAllocation"
    NODE_INSUFFICIENT_DEVICES = "NodeInsufficientDevices"
    NODE_INSUFFICIENT_CPU = "NodeInsufficientCpu"
    NODE_INSUFFICIENT_MEMORY = "NodeInsufficientMemory"
    NODE_TOPOLOGY_UNSATISFIED = "NodeTopologyUnsatisfied"
    NODE_UNSCHEDULABLE = "NodeUnschedulable"


class HamiError(Exception):
    """Base class of every error the SDK raises on purpose."""


class InvalidRequest(HamiError, ValueError):
    """Input that does not validate.  ``field`` names the offending field (dotted path)."""

    def __init__(self, field: str, message: str, *, source: str | None = None) -> None:
        self.field = field
        self.message = message
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}: {message}")


class InvalidConfig(InvalidRequest):
    """A configuration file that does not validate; ``source`` is the file."""


class InvalidInventory(InvalidRequest):
    """An inventory file that does not validate; ``source`` is the file."""


class InsufficientResources(HamiError):
    """No placement satisfies the request.

    ``reasons`` maps each rejected device uuid (or node name) to its reason codes.
    """

    def __init__(self, message: str, reasons: Mapping[str, Sequence[ReasonCode]] | None = None) -> None:
        self.reasons: dict[str, list[ReasonCode]] = {k: list(v) for k, v in (reasons or {}).items()}
        detail = "; ".join(f"{k}: {','.join(v)}" for k, v in sorted(self.reasons.items()))
        super().__init__(f"{message}" + (f" ({detail})" if detail else ""))

    def codes(self) -> set[ReasonCode]:
        return {code for codes in self.reasons.values() for code in codes}


class UnknownAllocation(HamiError, KeyError):
    """A handle that is not (or no longer) allocated."""

    def __init__(self, handle_id: str) -> None:
        self.handle_id = handle_id
        super().__init__(f"unknown or already released allocation {handle_id!r}")

    def __str__(self) -> str:  # KeyError would quote the whole message again
        return str(self.args[0])


class DeviceUnavailable(HamiError):
    """A device (or a whole vendor back end) cannot be used right now."""


class VendorLibraryError(HamiError):
    """A vendor library call failed; ``code`` is the vendor's own return code."""

    def __init__(self, vendor: str, function: str, code: int | None, message: str = "") -> None:
        self.vendor = vendor
        self.function = function
        self.code = code
        text = f"{vendor}: {function} failed"
        if code is not None:
            text += f" with code {code}"
        if message:
            text += f": {message}"
        super().__init__(text)


class LimiterError(HamiError):
    """The native limiter could not create, open or read a shared region."""
