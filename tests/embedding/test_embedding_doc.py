"""docs/embedding.md's Python blocks run as written: in order, in one fresh interpreter, from the repository's
root (where a reader runs them)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "embedding.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)


def test_the_embedding_page_runs_as_written() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 2  # the engine and the hand-off
    script = "\n".join(blocks)
    assert "ledger=" in script and "engine.allocate(" in script and "prepare(train.id" in script
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    permanent, codes = lines[-2].split(" ", 1)  # the 9-card request: no node has 9 H100
    assert permanent == "True" and "NodeInsufficientDevices" in codes
    region, preload = lines[-1].split()
    assert Path(preload).name.startswith("libhami_cuda") and not Path(region).exists()  # unprepared at the end
