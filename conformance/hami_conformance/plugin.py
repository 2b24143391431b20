"""pytest plugin entry point of the conformance suite (registered as ``pytest11``).

It is loaded into every pytest run of any project that has hami-devices
installed, so it only adds its options here: nothing is imported, collected or
changed unless ``--hami-adapter`` or ``--hami-adapter-class`` is given.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hami-conformance", "hami-devices conformance suite")
    group.addoption("--hami-adapter", metavar="NAME", help="certify the vendor adapter registered under NAME")
    group.addoption(
        "--hami-adapter-class",
        metavar="MODULE:CLASS",
        help="certify an adapter class that is not installed (module path or file.py, then :Class)",
    )
    group.addoption("--hami-inventory", metavar="FILE", help="run on the simulated back end built from FILE")
    group.addoption("--hami-config", metavar="FILE", help="hami-devices configuration YAML for the adapter")
    group.addoption(
        "--hami-backend",
        choices=("auto", "hardware", "simulated"),
        default="auto",
        help="auto: hardware when the adapter's probe finds it, else simulated (default)",
    )
    group.addoption("--hami-report", metavar="FILE", help="write the JSON conformance report to FILE")
    group.addoption("--hami-markdown", metavar="FILE", help="write the Markdown summary table to FILE")
    group.addoption(
        "--hami-examples", type=int, metavar="N", help="random sequences for the state-machine check (default 15)"
    )


def active(config: pytest.Config) -> bool:
    return bool(config.getoption("hami_adapter", None) or config.getoption("hami_adapter_class", None))


def pytest_configure(config: pytest.Config) -> None:
    if not active(config):
        return
    try:
        from hami_conformance.session import ConformanceSession
    except ModuleNotFoundError as exc:
        from hami_devices.extras import missing_extra

        # pytest is here, but not the rest of the [conformance] extra (hypothesis)
        missing = missing_extra(exc, "the hami-devices conformance suite")
        if missing is None:
            raise
        raise pytest.UsageError(str(missing)) from None

    config.pluginmanager.register(ConformanceSession.start(config), ConformanceSession.PLUGIN_NAME)
