"""Results are generated, never typed: every figure on a results page is a value of a bench's JSON stored in the
repository, and the pages are exactly what ``scripts/results.py render`` writes from those files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from .conftest import DOCS, REPO

RESULTS = DOCS / "results"
STORED = REPO / "bench" / "results"
# a figure: digits, not part of a word or a longer token (a commit hash, `p50`, `x86_64`, a file name)
FIGURE = re.compile(r"(?<![\w.\-])-?\d+(?:\.\d+)?(?![\w.]*\w)")


def _json_values(value: Any) -> tuple[list[float], list[str]]:
    numbers: list[float] = []
    strings: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
            strings.extend(str(k) for k in item)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int | float):
            numbers.append(float(item))
        else:
            strings.append(str(item))
    return numbers, strings


def _shown(token: str, value: float) -> bool:
    """Whether ``value`` rounds to ``token`` at the decimals the token shows."""
    decimals = len(token.split(".")[1]) if "." in token else 0
    return abs(Decimal(repr(value)) - Decimal(token)) <= Decimal(5) / Decimal(10 ** (decimals + 1)) * Decimal("1.0001")


def test_every_figure_on_a_results_page_comes_from_a_stored_json() -> None:
    stored = sorted(STORED.glob("*.json"))
    pages = sorted(RESULTS.glob("*.md"))
    assert stored and pages, "no stored results or no pages"
    numbers: list[float] = []
    words: set[str] = set()
    for path in stored:
        found, strings = _json_values(json.loads(path.read_text()))
        numbers += found
        for text in strings:
            words.update(FIGURE.findall(text))
    numbers = sorted(set(numbers))
    for page in pages:
        for line in page.read_text().splitlines():
            if line.startswith("<!--"):
                continue
            for token in FIGURE.findall(line):
                assert token in words or any(_shown(token, n) for n in numbers), f"{page.name}: {token!r} in {line!r}"


def test_the_pages_are_what_the_script_renders() -> None:
    run = subprocess.run([sys.executable, "scripts/results.py", "check"], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_stored_run_says_how_it_was_measured() -> None:
    for path in sorted(STORED.glob("*.json")):
        record = json.loads(path.read_text())
        assert re.fullmatch(r"[0-9a-f]{40}", record["commit"]), path
        assert record["command"].startswith("python bench/"), path
        assert len(record["load_average_before"]) == 3 and record["machine"]["cpus"] >= 1, path
        assert isinstance(record["output"], dict), path


def test_a_typed_figure_is_caught(tmp_path: Path) -> None:
    """The check above is not vacuous: a figure no stored JSON holds is found on a page."""
    numbers, _ = _json_values(json.loads(sorted(STORED.glob("*.json"))[0].read_text()))
    typed = "987654.321"
    assert not any(_shown(typed, n) for n in numbers)
    assert FIGURE.findall(f"| `place.p50_ms` | {typed} |") == [typed]
