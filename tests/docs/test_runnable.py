"""Every command in the docs runs: the shell and Python blocks marked ``<!-- run -->`` in the README and the pages
under docs/ run as a newcomer would run them, from a fresh folder holding the examples, with the installed
``hami-devices`` on PATH. (The README's Python API blocks and its limiter block run in tests/core/test_readme.py and
tests/packaging/test_readme.py; Airflow's and Spark's in their integration tests.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import DOCS, REPO

MARKED = re.compile(r"^<!-- run -->\n```(?P<lang>sh|bash|python)\n(?P<body>.*?)^```", re.M | re.S)
GUIDES = ["guides/scheduler-authors.md", "guides/operators.md", "guides/plugin-authors.md"]


def _blocks() -> list[tuple[str, str, str]]:
    found = []
    for doc in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for match in MARKED.finditer(doc.read_text()):
            found.append((doc.relative_to(REPO).as_posix(), match.group("lang"), match.group("body")))
    return found


BLOCKS = _blocks()


def test_each_guide_has_a_runnable_first_task() -> None:
    marked = {doc for doc, _, _ in BLOCKS}
    assert {f"docs/{guide}" for guide in GUIDES} <= marked, marked


@pytest.mark.parametrize(("doc", "lang", "body"), BLOCKS, ids=[f"{doc}-{i}" for i, (doc, _, _) in enumerate(BLOCKS)])
def test_the_block_runs_as_printed(doc: str, lang: str, body: str, tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("vendor-plugin"))
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
           "HAMI_REGION_DIR": str(tmp_path / "regions"), "HAMI_LEDGER": str(tmp_path / "ledger.db"),
           "LANG": os.environ.get("LANG", "C.UTF-8")}
    if lang == "python":
        command = [sys.executable, "-c", body]
    else:
        command = ["bash", "-euo", "pipefail", "-c", body.replace(".venv/bin/", f"{bin_dir}/")]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, f"{doc}:\n{body}\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
