"""Shared fixtures for the project's own tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# scripts/mutation.sh: every mutant meets the same draws, so a mutant is killed by the mutation, not by a
# draw the unmutated code would fail too (`--hypothesis-profile=mutation`)
settings.register_profile("mutation", derandomize=True, database=None)

# a real PostgreSQL server and ledger_target/any_ledger over SQLite and PostgreSQL, for any test
pytest_plugins = ["tests.ledger.fixtures"]

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = REPO_ROOT / "examples"

# Tests that measure shares of wall-clock time, or deadlines a loaded host stretches: marked `timing`, so that
# scripts/test.sh runs them alone after the rest (two workers on two cores would take the time they measure).
TIMED_MODULES = frozenset(
    {
        "tests/limiter/test_compute.py",
        "tests/limiter/test_compute_nvml.py",
        "tests/limiter/test_compute_shares.py",
        "tests/limiter/test_compute_check_script.py",
        "tests/observability/test_exporter.py",
        "tests/observability/test_publisher.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.resolve().relative_to(REPO_ROOT).as_posix()
        if where in TIMED_MODULES:
            item.add_marker(pytest.mark.timing)


@pytest.fixture(autouse=True)
def _private_region_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Limiter regions created by allocations land in a per-test folder, not the user's runtime dir."""
    monkeypatch.setenv("HAMI_REGION_DIR", str(tmp_path_factory.mktemp("regions")))
    yield


@pytest.fixture
def example_inventory() -> Path:
    return EXAMPLES / "cluster.yaml"


@pytest.fixture
def example_workload() -> Path:
    return EXAMPLES / "workload.yaml"
