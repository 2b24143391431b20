"""The SDK's error hierarchy and the fixed reason codes for rejected devices.

Every error raised on purpose by the SDK derives from ``HamiError`` so that an
embedding scheduler can catch one type.  Reason codes are a closed enum (named
after HAMi's, e.g. ``CardInsufficientMemory``) because schedulers log, count
and alert on them; free text would break that.
"""

from __future__ import annotations

import errno
from collections.abc import Collection, Mapping, Sequence
from enum import StrEnum
from typing import Protocol


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
    NODE_SELECTOR_MISMATCH = "NodeSelectorMismatch"
    NODE_TAINT_NOT_TOLERATED = "NodeTaintNotTolerated"
    NODE_ANTI_AFFINITY = "NodeAntiAffinity"
    UNKNOWN_VENDOR = "UnknownVendor"
    UNKNOWN_MODEL = "UnknownModel"
    PLACEMENT_STALE = "PlacementStale"


CAPACITY_CODES = frozenset(
    {
        ReasonCode.CARD_INSUFFICIENT_MEMORY,
        ReasonCode.CARD_INSUFFICIENT_CORE,
        ReasonCode.CARD_SPLIT_EXHAUSTED,
        ReasonCode.CARD_EXCLUSIVELY_HELD,
        ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE,
        ReasonCode.NODE_INSUFFICIENT_CPU,
        ReasonCode.NODE_INSUFFICIENT_MEMORY,
    }
)
"""Codes that describe what others hold right now: they go away as allocations are released."""


class HamiError(Exception):
    """Base class of every error the SDK raises on purpose."""


class InvalidRequest(HamiError, ValueError):
    """Input that does not validate.  ``field`` names the offending field (dotted path).

    ``errors``: every (field, message) found, the first being ``field``/``message``; a
    file that breaks several rules says all of them in one error.  ``line``: where in
    ``source`` the field is, when a file says.
    """

    def __init__(
        self,
        field: str,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        more: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.field = field
        self.message = message
        self.source = source
        self.line = line
        self.errors: list[tuple[str, str]] = [(field, message), *more]
        where = f"{source}:{line}: " if source and line else f"{source}: " if source else ""
        text = f"{where}{field}: {message}"
        if more:
            text += "".join(f"; {f}: {m}" for f, m in more) + f" ({len(self.errors)} errors)"
        super().__init__(text)

    @classmethod
    def all_of(cls, errors: Sequence[tuple[str, str]], *, source: str | None = None) -> InvalidRequest:
        """One error carrying every (field, message) of ``errors`` (at least one)."""
        (field, message), *more = errors
        return cls(field, message, source=source, more=more)


class InvalidConfig(InvalidRequest):
    """A configuration file that does not validate; ``source`` is the file."""


class InvalidInventory(InvalidRequest):
    """An inventory file that does not validate; ``source`` is the file."""


class Explanation(Protocol):
    """Reasons kept as data that is only spelled out when read (a refusal at cluster scale names thousands of
    devices; most callers read only the counts in its message)."""

    def counts(self) -> dict[ReasonCode, int]: ...

    def spelled_out(self) -> dict[str, list[ReasonCode]]: ...


class InsufficientResources(HamiError):
    """No placement satisfies the request.

    ``reasons`` maps each rejected device uuid (or node name, or ``<request>``) to its
    reason codes: the full detail, as data.  The message stays short at any cluster
    size: the count of each code and the nearest misses.  Codes in ``unmatched`` only say
    a device is not what the request asks for (another vendor, model, uuid ...): they come
    last, after the reasons that decide.  ``permanent`` says whether the request could not
    fit even on the empty cluster (``True``), only not now (``False``), or was not
    determined (``None``).
    """

    def __init__(
        self,
        message: str,
        reasons: Mapping[str, Sequence[ReasonCode]] | Explanation | None = None,
        *,
        permanent: bool | None = None,
        nearest: Sequence[str] = (),
        unmatched: Collection[ReasonCode] = (),
    ) -> None:
        self._explanation: Explanation | None = None
        self._reasons: dict[str, list[ReasonCode]] | None = None
        if reasons is not None and not isinstance(reasons, Mapping):
            self._explanation = reasons
        else:
            self._reasons = {k: list(v) for k, v in (reasons or {}).items()}
        self.permanent = permanent
        self.nearest: list[str] = list(nearest)
        self.unmatched = frozenset(unmatched)
        self.summary_message = message
        super().__init__(self._text())

    @property
    def reasons(self) -> dict[str, list[ReasonCode]]:
        if self._reasons is None:
            assert self._explanation is not None
            self._reasons = self._explanation.spelled_out()
        return self._reasons

    @property
    def codes(self) -> set[ReasonCode]:
        return set(self.counts)

    @property
    def counts(self) -> dict[ReasonCode, int]:
        """How many devices or nodes carry each code, most frequent first."""
        if self._reasons is None and self._explanation is not None:
            tally = self._explanation.counts()
        else:
            tally = {}
            for codes in self.reasons.values():
                for code in codes:
                    tally[code] = tally.get(code, 0) + 1
        return dict(sorted(((k, v) for k, v in tally.items() if v), key=lambda kv: (-kv[1], kv[0])))

    def _text(self) -> str:
        parts = [self.summary_message]
        counts = self.counts
        deciding = [f"{code} x{n}" for code, n in counts.items() if code not in self.unmatched]
        other = [f"{code} x{n}" for code, n in counts.items() if code in self.unmatched]
        if deciding:
            parts.append(", ".join(deciding))
        if other:
            parts.append("not what was asked: " + ", ".join(other))
        if self.nearest:
            parts.append("nearest: " + ", ".join(self.nearest[:3]))
        if self.permanent is not None:
            parts.append("never fits this cluster" if self.permanent else "fits when capacity frees")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, object]:
        return {
            "message": self.summary_message,
            "permanent": self.permanent,
            "counts": {str(k): v for k, v in self.counts.items()},
            "nearest": self.nearest,
            "reasons": {k: [str(c) for c in v] for k, v in sorted(self.reasons.items())},
        }


class UnknownAllocation(HamiError, KeyError):
    """A handle that is not (or no longer) allocated."""

    def __init__(self, handle_id: str) -> None:
        self.handle_id = handle_id
        super().__init__(f"unknown or already released allocation {handle_id!r}")

    def __str__(self) -> str:  # KeyError would quote the whole message again
        return str(self.args[0])


class AllocationInUse(HamiError):
    """A release refused because workload processes still use the allocation (``pids``: how each is known
    on this machine).  Stop them first, or release with ``force`` to revoke the allocation's limits."""

    def __init__(self, handle_id: str, pids: Sequence[str]) -> None:
        self.handle_id = handle_id
        self.pids = list(pids)
        super().__init__(
            f"allocation {handle_id!r} is in use by {len(self.pids)} live process(es): {', '.join(self.pids)}; "
            "stop them first, or release with --force (force=True) to revoke its limits"
        )


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


class AmbiguousEnvironment(HamiError):
    """An allocation spans several (node, vendor) groups, so it has no single workload environment."""


class LimiterError(HamiError):
    """The native limiter could not create, open or read a shared region."""


class CannotListen(HamiError):
    """A server could not bind its address: the port is taken, or the address is not one of this machine's."""

    def __init__(self, host: str, port: int, error: OSError) -> None:
        self.host = host
        self.port = port
        reason = error.strerror or str(error)
        hint = "another process serves that port" if error.errno == errno.EADDRINUSE else "not an address here"
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        super().__init__(f"cannot listen on {where}: {reason} ({hint}; choose another with --listen)")


class LedgerUnavailable(HamiError):
    """The ledger file cannot be used: not a database or damaged, locked by another process for longer than
    the wait, or not accessible."""


class LedgerSchemaError(HamiError):
    """A ledger file written by a newer release (its schema version is unknown here), or not a ledger."""


class MissingExtra(HamiError, ImportError):
    """A feature needs an optional dependency (a ``hami-devices[EXTRA]``) that is not installed."""

    def __init__(self, module: str, extra: str, feature: str) -> None:
        self.module = module
        self.extra = extra
        self.feature = feature
        super().__init__(f"{feature} needs {module}, which is not installed: pip install 'hami-devices[{extra}]'")


class NoLedger(HamiError):
    """An engine without a ledger was asked to commit (``engine.allocate``, ``commit``, ``release``, ``refresh``)."""

    def __init__(self, operation: str) -> None:
        super().__init__(
            f"engine.{operation} needs an engine built with a ledger: "
            "hd.build_engine(inventory, config, ledger=hd.SqliteLedger(path)) (or hd.MemoryLedger())"
        )
