"""The documentation: the README, docs/ and the pages generated into docs/results/."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
DOCS = REPO / "docs"
