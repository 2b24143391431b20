"""The optional dependencies (``hami-devices[EXTRA]``) and a clear error when one is missing.

The base install is the core a scheduler embeds; heavier or integration-only libraries are extras
(``pyproject.toml``).  Every module that uses one imports it where the feature is used, never at
import time, so ``hami-devices --help`` and the core verbs run without them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from hami_devices.errors import MissingExtra

EXTRA_OF_MODULE: dict[str, str] = {
    # top-level import name: the extra that installs it
    "pytest": "conformance",
    "_pytest": "conformance",
    "hypothesis": "conformance",
    "matplotlib": "plot",
    "prometheus_client": "observability",
    "kubernetes": "kubernetes",
    "kubernetes_validate": "kubernetes",
    "cel": "kubernetes",
    "grpc": "kubernetes",
    "google": "kubernetes",  # protobuf's google.protobuf
    "ray": "ray",
    "onnx": "precision",
    "onnxruntime": "precision",
    "pyspark": "spark",
    # (the [airflow] extra's modules are imported by DAG files; its own venv in the tests: not listed here)
    "highspy": "research",  # the bound LP and the defragmentation MILP; [solver] installs the same
    "psycopg": "postgresql",
}


def missing_extra(exc: ModuleNotFoundError, feature: str) -> MissingExtra | None:
    """The ``MissingExtra`` an import failure stands for, or None when it is not an optional dependency."""
    top = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    return MissingExtra(top, extra, feature) if extra else None


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` (an optional dependency) or raise ``MissingExtra`` naming its extra."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc, feature)
        if missing is None:
            raise
        raise missing from None
