"""Loading plugins through entry points (stevedore), each failure recorded by name.

There is no built-in list of vendors or scorers: the built-in ones register in
the same entry-point namespaces as a third-party package does.  A plugin that
fails to import is recorded with its error and the others still load.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stevedore import ExtensionManager

from hami_devices.errors import HamiError

VENDOR_NAMESPACE = "hami_devices.vendors"
SCORER_NAMESPACE = "hami_devices.scorers"
CONFORMANCE_NAMESPACE = "hami_devices.conformance"


@dataclass
class PluginFailure:
    name: str
    entry_point: str
    error: str


def load_plugins(namespace: str, names: Iterable[str] | None) -> tuple[dict[str, Any], dict[str, PluginFailure]]:
    """The objects the entry points of ``namespace`` name (all, or ``names``), and the ones that failed."""
    failures: dict[str, PluginFailure] = {}

    def on_failure(_manager: ExtensionManager[Any], entry_point: Any, exc: BaseException) -> None:
        failures[entry_point.name] = PluginFailure(
            entry_point.name, f"{entry_point.value}", f"{type(exc).__name__}: {exc}"
        )

    manager: ExtensionManager[Any] = ExtensionManager(
        namespace=namespace,
        invoke_on_load=False,
        on_load_failure_callback=on_failure,
    )
    wanted = set(names) if names is not None else None
    plugins = {ext.name: ext.plugin for ext in manager if wanted is None or ext.name in wanted}
    if wanted is not None:
        failures = {k: v for k, v in failures.items() if k in wanted}
    return plugins, failures


def conformance_suite() -> Any:
    """The conformance suite's face for the command line and ``doctor`` (``hami_conformance.suite``), through
    its entry point; ``HamiError`` when it is not installed or fails to load."""
    found, failures = load_plugins(CONFORMANCE_NAMESPACE, ["suite"])
    if "suite" not in found:
        why = failures["suite"].error if "suite" in failures else "no entry point 'suite' is registered"
        raise HamiError(f"the conformance suite is not available: {why}")
    return found["suite"]
