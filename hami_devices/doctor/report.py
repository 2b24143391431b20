"""One check's verdict, and the report ``hami-devices doctor`` prints."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"


EXIT_CODES = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}


@dataclass(frozen=True)
class Check:
    """``id`` names what was checked (``vendor.nvidia.library``); ``why`` is one line; ``action`` says
    what to do about a WARN or FAIL; ``detail`` holds the facts behind it for scripts."""

    id: str
    status: Status
    why: str
    action: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


WHY_LIMIT = 240
"""A why stays one readable line; the whole text (a library's long error, say) goes to ``detail["message"]``."""


def _check(id: str, status: Status, why: str, action: str, detail: dict[str, Any]) -> Check:
    line = " ".join(why.split())
    if len(line) > WHY_LIMIT:
        detail = {**detail, "message": line}
        line = line[: WHY_LIMIT - 3].rstrip() + "..."
    return Check(id, status, line, action, detail)


def passed(id: str, why: str, **detail: Any) -> Check:
    return _check(id, Status.PASS, why, "", detail)


def warned(id: str, why: str, action: str, **detail: Any) -> Check:
    return _check(id, Status.WARN, why, action, detail)


def failed(id: str, why: str, action: str, **detail: Any) -> Check:
    return _check(id, Status.FAIL, why, action, detail)


@dataclass(frozen=True)
class Report:
    checks: list[Check]
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> Status:
        worst = Status.PASS
        for check in self.checks:
            if EXIT_CODES[check.status] > EXIT_CODES[worst]:
                worst = check.status
        return worst

    @property
    def exit_code(self) -> int:
        """0 when every check passed, 1 when some warned (and none failed), 2 when some failed."""
        return EXIT_CODES[self.status]

    def counts(self) -> dict[str, int]:
        found = Counter(c.status for c in self.checks)
        return {s.value: found.get(s, 0) for s in Status}

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "environment": self.environment,
            "checks": [{**asdict(c), "status": c.status.value} for c in self.checks],
        }
