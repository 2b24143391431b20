"""Loading vendor adapters and scorers through entry points (stevedore).

There is no built-in list: NVIDIA, Ascend and Cambricon register in
``hami_devices.vendors`` exactly as a third-party package does.  A plugin that
fails to import is recorded with its error and the others still load.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_devices.adapter import Probe, VendorAdapter
from hami_devices.config import HamiConfig
from hami_devices.errors import DeviceUnavailable
from hami_devices.inputs import as_config
from hami_devices.plugins import VENDOR_NAMESPACE, PluginFailure, load_plugins


@dataclass
class VendorRegistry:
    adapters: dict[str, VendorAdapter] = field(default_factory=dict)
    failures: dict[str, PluginFailure] = field(default_factory=dict)

    def probes(self) -> dict[str, Probe]:
        return {name: safe_probe(adapter) for name, adapter in self.adapters.items()}

    def get(self, name: str) -> VendorAdapter:
        if name in self.adapters:
            return self.adapters[name]
        if name in self.failures:
            raise DeviceUnavailable(f"vendor plugin {name!r} failed to load: {self.failures[name].error}")
        known = ", ".join(sorted(self.adapters)) or "none"
        raise DeviceUnavailable(f"no vendor plugin named {name!r} (loaded: {known})")


def safe_probe(adapter: VendorAdapter) -> Probe:
    """A probe that raised is reported as unavailable, never propagated."""
    try:
        return adapter.probe()
    except Exception as exc:
        return Probe(False, f"probe raised {type(exc).__name__}: {exc}")


PATH_SUFFIXES = ("_LIBRARY", "_FIXTURE", "_STATE")
"""``HAMI_*`` variables with these endings name files: a vendor library (``HAMI_NVML_LIBRARY``), or a fake
library's device table and state (``HAMI_FAKE_NVML_FIXTURE``)."""


def path_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """Every file-naming ``HAMI_*`` variable of ``environ``, made absolute against this process's folder.

    A library given by a bare name (``libnvidia-ml.so.1``) is left to the loader's search path."""
    out: dict[str, str] = {}
    for name, value in environ.items():
        if not (name.startswith("HAMI_") and name.endswith(PATH_SUFFIXES) and value):
            continue
        bare_library = name.endswith("_LIBRARY") and "/" not in value
        out[name] = value if bare_library or os.path.isabs(value) else os.path.abspath(value)
    return out


def resolve_path_variables(environ: MutableMapping[str, str] | None = None) -> None:
    """Make the file-naming variables absolute where they are given, once: a process started later in
    another folder (a Spark executor in its work folder) then opens the same files."""
    environ = os.environ if environ is None else environ
    environ.update(path_variables(environ))


def load_vendors(
    names: Iterable[str] | None = None, config: HamiConfig | Mapping[str, Any] | str | Path | None = None
) -> VendorRegistry:
    """Instantiate every registered vendor adapter (or the named ones); relative library and fixture
    paths in the environment are made absolute first (``resolve_path_variables``).

    Args:
        names: entry-point names in ``hami_devices.vendors`` to load; omitted: all of them.
        config: the configuration each adapter is built with, as every entry point takes it: a
            ``HamiConfig``, a mapping of its keys or the path of its YAML file; omitted: the defaults.
            Anything else is an ``InvalidConfig`` naming ``config``.

    Returns:
        The adapters that loaded, by name, and the plugins that did not, each with its error: a plugin that
        fails to import or to build never takes the others down (``hami-devices vendors`` prints both).
    """
    if config is not None:
        config = as_config(config)
    resolve_path_variables()
    plugins, failures = load_plugins(VENDOR_NAMESPACE, names)
    registry = VendorRegistry(failures=failures)
    for name, plugin in sorted(plugins.items()):
        try:
            adapter = plugin(config)
            if not isinstance(adapter, VendorAdapter):
                raise TypeError(f"{plugin!r} is not a VendorAdapter")
        except Exception as exc:
            registry.failures[name] = PluginFailure(name, repr(plugin), f"{type(exc).__name__}: {exc}")
            continue
        registry.adapters[name] = adapter
    if names is not None:
        for name in names:
            if name not in registry.adapters and name not in registry.failures:
                registry.failures[name] = PluginFailure(name, "", f"no entry point {name!r} in {VENDOR_NAMESPACE}")
    return registry


_adapter_cache: dict[str, VendorAdapter] = {}
_cache_lock = threading.Lock()


def adapter_for(vendor: str, config: HamiConfig | None = None) -> VendorAdapter:
    """One shared adapter per vendor name, loaded on first use."""
    with _cache_lock:
        if vendor not in _adapter_cache:
            _adapter_cache[vendor] = load_vendors([vendor], config).get(vendor)
        return _adapter_cache[vendor]
