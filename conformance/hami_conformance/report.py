"""Conformance results, the certification levels earned, and the JSON and Markdown reports built from them."""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_conformance.catalog import CheckSpec, Level, LevelSpec, level_of, load_levels

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


@dataclass(frozen=True)
class LevelResult:
    """One certification level for one adapter: claimed by its capabilities, earned by its checks."""

    spec: LevelSpec
    claimed: bool
    earned: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.spec.name, "claimed": self.claimed, "earned": self.earned, "detail": self.detail}


def level_results(results: list[CheckResult], capabilities: set[str]) -> list[LevelResult]:
    """Each level: claimed when its capability is declared (the core always), earned when every
    MUST check of it that applies passed.  N/A and not-run checks do not earn a level, except a
    check that needs a profile hook the adapter does not give (it does not apply)."""
    out = []
    for level in load_levels():
        claimed = level.capability is None or str(level.capability) in capabilities
        if not claimed:
            out.append(LevelResult(level, False, False, f"capability '{level.capability}' is not declared"))
            continue
        applicable = [
            r
            for r in results
            if r.spec.level == Level.MUST
            and level_of(r.spec) is level
            and (r.spec.capability is None or str(r.spec.capability) in capabilities)
            and not (r.spec.needs is not None and r.result == NA)
        ]
        missing = [f"{r.spec.id} {r.result}" for r in applicable if r.result in (FAIL, NA)]
        not_run = sum(r.result == NOT_RUN for r in applicable)
        if not_run:
            missing.append(f"{not_run} not run")
        detail = f"{len(applicable)} MUST checks passed" if not missing else "not passed: " + ", ".join(missing)
        out.append(LevelResult(level, True, not missing, detail))
    return out


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

    def levels(self) -> list[LevelResult]:
        return level_results(self.results, set(self.adapter.get("capabilities", [])))

    @property
    def level(self) -> str:
        """The levels earned, e.g. ``core+isolation+partitions``; ``none`` unless the core is earned."""
        if not self.certified:
            return "none"
        return "+".join(r.spec.name for r in self.levels() if r.earned)

    @property
    def claimed_level(self) -> str:
        return "+".join(r.spec.name for r in self.levels() if r.claimed)

    @property
    def certified(self) -> bool:
        """No MUST failed and the core level is earned (every core MUST check ran and passed)."""
        core = next(r for r in self.levels() if r.spec.capability is None)
        return core.earned and not self.must_failed()

    @property
    def full_level(self) -> bool:
        """Certified at every level the adapter's capabilities claim."""
        return self.certified and all(r.earned for r in self.levels() if r.claimed)

    def verdict(self) -> str:
        if self.certified:
            full = "" if self.full_level else f" (claimed {self.claimed_level})"
            return f"certified at level {self.level}{full}"
        failed = ", ".join(self.must_failed())
        return f"NOT certified ({failed or 'core MUST checks did not all run and pass'})"

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
            "level": self.level,
            "claimed_level": self.claimed_level,
            "full_level": self.full_level,
            "levels": [r.as_dict() for r in self.levels()],
            "must_failed": self.must_failed(),
            "counts": self.counts(),
            "checks": [r.as_dict() for r in self.results],
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2) + "\n")

    def markdown(self) -> str:
        a = self.adapter
        counts = self.counts()
        lines = [
            f"# Conformance: {a.get('name')} {a.get('version')}",
            "",
            f"hami-conformance {self.suite_version}, back end `{a.get('backend')}`, "
            f"capabilities: {', '.join(a.get('capabilities', [])) or 'none'}.",
            "",
            f"**{self.verdict()}.**",
            "",
            "| Certification level | claimed | earned | detail |",
            "|---|---|---|---|",
        ]
        for lr in self.levels():
            detail = lr.detail.replace("|", "\\|")
            lines.append(f"| {lr.spec.name} | {_yes(lr.claimed)} | {_yes(lr.earned)} | {detail} |")
        lines += ["", "| Checks | pass | fail | n/a | not run |", "|---|---|---|---|---|"]
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


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
