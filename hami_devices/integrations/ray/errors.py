"""Why a Ray task got no share, in a form that survives Ray's error wrapping.

Ray hands a failed runtime-env set-up to the driver as text (``RuntimeEnvSetupError``),
so the refusal's reason codes travel as one marker line that ``refusal(exc)`` reads back.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hami_devices.errors import HamiError, InsufficientResources

MARKER = "hami-refusal: "
_MARKER_LINE = re.compile(re.escape(MARKER) + r"(\{.*\})")


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
        )

    def _text(self) -> str:
        detail = {
            "codes": sorted(str(c) for c in self.codes),
            "counts": {str(k): v for k, v in self.counts.items()},
            "permanent": self.permanent,
            "node": getattr(self, "node", None),
            "share": getattr(self, "share", None),
        }
        return f"{super()._text()}\n{MARKER}{json.dumps(detail, sort_keys=True)}"


class ShareMissing(HamiError):
    """A worker meant to run under a share runs without one (or without its limiter): it refuses to run."""


def refusal(error: BaseException | str) -> dict[str, Any] | None:
    """The reason codes (and node, share, permanent) of a refused share, from the error Ray raised; else None."""
    found = _MARKER_LINE.findall(str(error))
    if not found:
        return None
    detail: dict[str, Any] = json.loads(found[-1])
    return detail
