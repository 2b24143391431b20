"""Render the check catalog as Markdown: ``python -m hami_conformance.docs > conformance/CHECKS.md``."""

from __future__ import annotations

from hami_conformance import SUITE_VERSION
from hami_conformance.catalog import load_catalog, load_levels

HEADER = """# Conformance checks

Generated from `hami_conformance/catalog.yaml` (suite {version}) by `python -m hami_conformance.docs`;
do not edit by hand.  A check with a capability is N/A, with the reason, for an adapter that does not
declare that capability; for an adapter that declares it, a check that cannot run fails (only the
operator's configuration, such as `isolation-level: none`, may switch one off).  A check that needs a
profile hook (`Profile.faults`) is N/A, with the reason, where the adapter's profile does not give it,
and holds back no level: the suite cannot make that event happen without the adapter's library; with
the hook it must pass like any other.  A MUST failure fails
certification; a SHOULD failure is reported only.  Every check compares the adapter with facts it
cannot bend: the devices as discovery reported them, the ledger, the limiter regions, the catalog.

## Certification levels

An adapter claims the core level, and each level whose capability it declares; it earns a level when
every MUST check of that level that applies to it passed (N/A and not-run checks earn nothing).  Reports
print the levels earned, e.g. `core+isolation+partitions`, next to the levels claimed.

| Level | Claimed by | Checks of capabilities | Requirement |
|---|---|---|---|
"""

COLUMNS = ("Check", "Level", "Capability", "Requirement", "Bug class it exists for")


def render() -> str:
    lines = [HEADER.format(version=SUITE_VERSION).rstrip("\n")]
    for level in load_levels():
        claimed = f"`{level.capability}`" if level.capability else "every adapter"
        caps = ", ".join(f"`{c}`" for c in sorted(level.capabilities)) or "none (and the others outside a level)"
        lines.append(f"| {level.name} | {claimed} | {caps} | {level.requirement} |")
    group = None
    for spec in load_catalog():
        if spec.group != group:
            group = spec.group
            lines += ["", f"## {group}", "", f"| {' | '.join(COLUMNS)} |", "|---" * len(COLUMNS) + "|"]
        applies = spec.capability or (f"needs `Profile.{spec.needs}`" if spec.needs else "")
        lines.append(f"| `{spec.id}` | {spec.level} | {applies} | {spec.requirement} | {spec.catches} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
