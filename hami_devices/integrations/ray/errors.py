"""Why a Ray task got no share, in a form that survives Ray's error wrapping.

Ray hands a failed runtime-env set-up to the driver as text (``RuntimeEnvSetupError``): the
exception formatted with its traceback.  A refusal is an answer, not a crash, so it reaches the
driver as one line -- the reason, then its codes as a marker that ``refusal(exc)`` reads back --
while the agent's log keeps the traceback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from hami_devices.errors import HamiError, InsufficientResources, ReasonCode

MARKER = "hami-refusal: "
_MARKER_LINE = re.compile(re.escape(MARKER) + r"(\{.*\})")  # greedy within its line: the whole JSON object


class ShareRefused(InsufficientResources):
    """The node Ray chose cannot grant the share (the SDK's reason codes are in ``codes`` and the message)."""

    def __init__(self, cause: InsufficientResources, *, node: str, share: str) -> None:
        self.node = node
        self.share = share
        super().__init__(
            f"hami: the share {share} cannot be granted on node {node}: {cause.summary_message}",
            cause.reasons,
            permanent=cause.permanent,
            nearest=cause.nearest,
            unmatched=cause.unmatched,
        )

    def _text(self) -> str:
        detail = {
            "codes": sorted(str(c) for c in self.codes),
            "counts": {str(k): v for k, v in self.counts.items()},
            "permanent": self.permanent,
            "node": getattr(self, "node", None),
            "share": getattr(self, "share", None),
        }
        return f"{super()._text()} [{MARKER}{json.dumps(detail, sort_keys=True)}]"

    @property
    def __traceback__(self) -> None:
        """None to whoever formats the refusal as Ray's agent does (``format_exception(type(e), e,
        e.__traceback__)``), so the driver reads one line; ``sys.exc_info()`` and logging still have it."""
        return None

    @__traceback__.setter
    def __traceback__(self, value: TracebackType | None) -> None:
        BaseException.with_traceback(self, value)


class ShareMissing(HamiError):
    """A worker meant to run under a share runs without one (or without its limiter): it refuses to run."""


def refusal(error: BaseException | str) -> dict[str, Any] | None:
    """The reason codes (and node, share, permanent) of a refused share, from the error Ray raised; else None."""
    found = _MARKER_LINE.findall(str(error))
    if not found:
        return None
    detail: dict[str, Any] = json.loads(found[-1])
    return detail


class ShareRefusedEverywhere(InsufficientResources):
    """Every node that could hold a share refused it (``refusals``: node -> what ``refusal`` read from its error)."""

    def __init__(self, refusals: Mapping[str, Mapping[str, Any]]) -> None:
        self.refusals = {node: dict(detail) for node, detail in refusals.items()}
        permanence = {detail.get("permanent") for detail in self.refusals.values()}
        shares = sorted({str(d["share"]) for d in self.refusals.values() if d.get("share")})
        super().__init__(
            f"hami: no node could grant the share {', '.join(shares) or '?'}: refused by {', '.join(self.refusals)}",
            {node: [ReasonCode(c) for c in detail.get("codes", [])] for node, detail in self.refusals.items()},
            permanent=permanence.pop() if len(permanence) == 1 else None,
        )

    def _text(self) -> str:
        detail = {
            "codes": sorted(str(c) for c in self.codes),
            "counts": {str(k): v for k, v in self.counts.items()},
            "permanent": self.permanent,
            "node": None,
            "nodes": list(self.refusals),
            "share": next((d.get("share") for d in self.refusals.values()), None),
        }
        return f"{super()._text()} [{MARKER}{json.dumps(detail, sort_keys=True)}]"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.refusals,))  # Ray pickles a task's error to hand it to the driver
