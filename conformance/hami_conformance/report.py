"""Conformance results and the JSON and Markdown reports built from them."""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_conformance.catalog import CheckSpec, Level

PASS, FAIL, NA, NOT_RUN = "pass", "fail", "n/a", "not-run"
RESULTS = (PASS, FAIL, NA, NOT_RUN)


@dataclass
class CheckResult:
    spec: CheckSpec
    result: str = NOT_RUN
    reason: str = ""
    duration_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.spec.id,
            "level": str(self.spec.level),
            "capability": str(self.spec.capability) if self.spec.capability else None,
            "requirement": self.spec.requirement,
            "result": self.result,
            "reason": self.reason,
            "duration_s": round(self.duration_s, 3),
        }


@dataclass
class Report:
    suite_version: str
    adapter: dict[str, Any]
    results: list[CheckResult]
    started_at: float = field(default_factory=time.time)
    duration_s: float = 0.0

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for level in (*Level, "total"):
            rows = [r for r in self.results if level == "total" or r.spec.level == level]
            out[str(level)] = {res: sum(r.result == res for r in rows) for res in RESULTS}
        return out

    def must_failed(self) -> list[str]:
        return [r.spec.id for r in self.results if r.spec.level == Level.MUST and r.result == FAIL]

    @property
    def certified(self) -> bool:
        """Every MUST passed or was declined through a capability, and all of them ran."""
        return all(r.result in (PASS, NA) for r in self.results if r.spec.level == Level.MUST)

    def as_dict(self) -> dict[str, Any]:
        from hami_devices import __version__ as sdk_version

        return {
            "suite": "hami-conformance",
            "suite_version": self.suite_version,
            "hami_devices_version": sdk_version,
            "adapter": self.adapter,
            "python": platform.python_version(),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_at)),
            "duration_s": round(self.duration_s, 2),
            "certified": self.certified,
            "must_failed": self.must_failed(),
            "counts": self.counts(),
            "checks": [r.as_dict() for r in self.results],
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2) + "\n")

    def markdown(self) -> str:
        a = self.adapter
        counts = self.counts()
        verdict = (
            "certified: every MUST passed"
            if self.certified
            else f"NOT certified ({', '.join(self.must_failed()) or 'MUST checks did not run'})"
        )
        lines = [
            f"# Conformance: {a.get('name')} {a.get('version')}",
            "",
            f"hami-conformance {self.suite_version}, back end `{a.get('backend')}`, "
            f"capabilities: {', '.join(a.get('capabilities', [])) or 'none'}.",
            "",
            f"**{verdict}.**",
            "",
            "| Level | pass | fail | n/a | not run |",
            "|---|---|---|---|---|",
        ]
        for level in ("MUST", "SHOULD"):
            c = counts[level]
            lines.append(f"| {level} | {c[PASS]} | {c[FAIL]} | {c[NA]} | {c[NOT_RUN]} |")
        lines += ["", "| Check | Level | Result | Reason |", "|---|---|---|---|"]
        for r in self.results:
            reason = " ".join(r.reason.split()).replace("|", "\\|")
            if len(reason) > 300:
                reason = reason[:297] + "..."
            lines.append(f"| `{r.spec.id}` | {r.spec.level} | {r.result.upper()} | {reason} |")
        return "\n".join(lines) + "\n"

    def write_markdown(self, path: str | Path) -> None:
        Path(path).write_text(self.markdown())
