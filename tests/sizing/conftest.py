"""The corpus, built and exported once per session (tests/sizing/corpus.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .corpus import export


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return export(tmp_path_factory.mktemp("corpus"))
