"""A small inventory for the scheduler author's path: two nodes of two T4 and one node of one L4."""

from __future__ import annotations

from pathlib import Path

import pytest

SMALL = """\
nodes:
  - name: t4
    replicas: 2
    cpu_milli: 8000
    memory_mib: 65536
    devices:
      - {vendor: nvidia, model: T4, count: 2}
  - name: l4-a
    cpu_milli: 8000
    memory_mib: 65536
    devices:
      - {vendor: nvidia, model: L4, count: 1}
"""


@pytest.fixture(scope="session")
def small_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("embedding") / "small.yaml"
    path.write_text(SMALL)
    return path
