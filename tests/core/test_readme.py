"""The README's Python examples run as printed, from the repository root, in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys

from ..conftest import REPO_ROOT


def test_readme_python_examples_run_as_printed() -> None:
    blocks = re.findall(r"```python\n(.*?)```", (REPO_ROOT / "README.md").read_text(), flags=re.S)
    # The Ray, Airflow and Spark examples need their engine: tests/integrations/ray runs the same two shares on one
    # GPU against a real local Ray cluster, tests/integrations/airflow runs the DAG with `airflow tasks test`, and
    # tests/integrations/spark runs the Spark block in a local-cluster.
    blocks = [b for b in blocks if "from hami_devices.integrations import" not in b]
    assert len(blocks) >= 2
    result = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "CUDA_VISIBLE_DEVICES" in result.stdout
