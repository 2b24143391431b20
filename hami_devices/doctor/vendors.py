"""Vendor checks: each management library found, loaded and its version (the adapter's ``probe``),
the device nodes workloads open, and whether the library and the driver under it agree."""

from __future__ import annotations

import os
from pathlib import Path

from hami_devices.adapter import VendorAdapter
from hami_devices.doctor.report import Check, failed, passed, warned
from hami_devices.registry import VendorRegistry, safe_probe


def device_nodes(adapter: VendorAdapter, dev_root: Path) -> list[Path]:
    found: set[Path] = set()
    for pattern in adapter.device_nodes:
        found.update(dev_root.glob(pattern))
    return sorted(found)


def _names(paths: list[Path], limit: int = 4) -> str:
    names = [p.name for p in paths[:limit]]
    return ", ".join(names) + (f" (+{len(paths) - limit})" if len(paths) > limit else "")


def vendor_checks(registry: VendorRegistry, dev_root: Path) -> list[Check]:
    checks: list[Check] = []
    for name, failure in sorted(registry.failures.items()):
        checks.append(
            failed(
                f"vendor.{name}.plugin",
                f"the vendor plugin {failure.entry_point} failed to load: {failure.error.strip().splitlines()[-1]}",
                "reinstall the package that provides it, or uninstall it (hami-devices vendors shows the traceback)",
                entry_point=failure.entry_point,
            )
        )
    present = False
    for name, adapter in sorted(registry.adapters.items()):
        probe = safe_probe(adapter)
        nodes = device_nodes(adapter, dev_root)
        present = present or probe.available or bool(nodes)
        checks.append(_library(name, adapter, probe.available, probe.detail, probe.library, nodes))
        if adapter.device_nodes and (probe.available or nodes):
            checks.append(_nodes(name, adapter, nodes, dev_root))
        if probe.available:
            agreement = _agreement(adapter)
            if agreement is not None:
                checks.append(agreement)
    if not present:
        checks.append(
            warned(
                "vendor.any",
                "no accelerator here: no vendor library answered and no device nodes were found",
                "install the vendor driver (or mount it into the container); without hardware, the simulated "
                "back end works from an inventory file (--inventory)",
            )
        )
    return checks


def _library(
    name: str, adapter: VendorAdapter, available: bool, detail: str, library: str | None, nodes: list[Path]
) -> Check:
    id = f"vendor.{name}.library"
    variable = adapter.library_env
    requested = os.environ.get(variable) if variable else None
    if available:
        return passed(id, f"{detail} ({library})" if library else detail, library=library)
    set_it = f", or set {variable} to its path" if variable else ""
    if requested:
        return failed(
            id,
            f"{variable}={requested} names a library that cannot be used: {detail}",
            f"point {variable} at the vendor's management library, or unset it to use the system's",
            library=requested,
        )
    if nodes:
        return failed(
            id,
            f"{len(nodes)} device node(s) ({_names(nodes)}) but the library cannot be used: {detail}",
            f"install the driver's user-space libraries (in a container: mount them){set_it}",
        )
    if adapter.device_nodes:
        short = detail.split("(")[0].strip()  # the library's own long search list stays in detail
        return passed(id, f"not on this node (no device nodes; {short})", present=False, message=detail)
    return warned(
        id,
        f"the plugin is installed but its library is not usable: {detail}",
        "install the vendor's library (see the plugin's documentation), or uninstall the plugin",
    )


def _nodes(name: str, adapter: VendorAdapter, nodes: list[Path], dev_root: Path) -> Check:
    id = f"vendor.{name}.device-nodes"
    patterns = ", ".join(adapter.device_nodes)
    if not nodes:
        return warned(
            id,
            f"the library answers but there is no device node matching {patterns} under {dev_root}",
            "workloads cannot open the devices: mount the device nodes (in a container: the runtime's device "
            "options or the vendor's device plugin)",
        )
    closed = [n for n in nodes if not os.access(n, os.R_OK | os.W_OK)]
    if closed:
        return warned(
            id,
            f"{len(closed)} of {len(nodes)} device node(s) ({_names(closed)}) are not readable and writable "
            f"by uid {os.geteuid()}",
            "run workloads as a user of the device nodes' group, or fix their permissions",
            nodes=[str(n) for n in nodes],
        )
    return passed(id, f"{len(nodes)} device node(s) under {dev_root}: {_names(nodes)}", nodes=[str(n) for n in nodes])


def _agreement(adapter: VendorAdapter) -> Check | None:
    try:
        verdict = adapter.driver_agreement()
    except Exception as exc:  # a plugin's hook must not take the report down
        verdict = (False, f"driver_agreement raised {type(exc).__name__}: {exc}")
    if verdict is None:
        return None
    agrees, why = verdict
    id = f"vendor.{adapter.name}.driver"
    if agrees:
        return passed(id, why)
    return failed(id, why, "reboot after a driver upgrade, or mount the user-space libraries of the loaded driver")
