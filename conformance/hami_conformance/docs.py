"""Render the check catalog as Markdown: ``python -m hami_conformance.docs > conformance/CHECKS.md``."""

from __future__ import annotations

from hami_conformance import SUITE_VERSION
from hami_conformance.catalog import load_catalog

HEADER = """# Conformance checks

Generated from `hami_conformance/catalog.yaml` (suite {version}) by `python -m hami_conformance.docs`;
do not edit by hand.  A check with a capability is N/A, with the reason, for an adapter that does not
declare that capability.  A MUST failure fails certification; a SHOULD failure is reported only.
"""


def render() -> str:
    lines = [HEADER.format(version=SUITE_VERSION)]
    group = None
    for spec in load_catalog():
        if spec.group != group:
            group = spec.group
            lines += ["", f"## {group}", "", "| Check | Level | Capability | Requirement |", "|---|---|---|---|"]
        lines.append(f"| `{spec.id}` | {spec.level} | {spec.capability or ''} | {spec.requirement} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
