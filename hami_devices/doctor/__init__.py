"""``hami-devices doctor``: the environment check a deployment starts with.

Every check is PASS, WARN or FAIL with one line of why and, for the last two, what to do; the
report's exit code is 0 (all pass), 1 (some warn) or 2 (some fail).  Nothing here changes the
node: the ledger is opened read-only, regions live in a temporary folder, and the limiter probe
allocates a few MiB for a moment.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from hami_devices.doctor.report import Check, Report, Status


@dataclass(frozen=True)
class Options:
    ledger: str | Path  # a SQLite file, or a postgresql:// URL
    config: str | None = None
    vendors: list[str] | None = None
    dev_root: Path = Path("/dev")
    limiter_probe: bool = True
    kubelet_dir: Path | None = None
    inventory: Path | None = None  # show node-config's effective values on these nodes (default: the hardware)


def run_doctor(options: Options) -> Report:
    from hami_devices import __version__
    from hami_devices.config import HamiConfig, load_config
    from hami_devices.doctor import conflicts, context, database, nodeconfig, shims, storage, vendors
    from hami_devices.errors import HamiError
    from hami_devices.registry import load_vendors

    checks: list[Check] = [context.config_check(options.config), context.native_check()]
    try:
        config = load_config(options.config) if options.config else HamiConfig()
    except HamiError:
        config = HamiConfig()  # the config check above says what is wrong; the rest runs on the defaults
    registry = load_vendors(options.vendors, config)
    checks += vendors.vendor_checks(registry, options.dev_root)
    node_settings = nodeconfig.node_config_check(config, registry, options.inventory)
    if node_settings is not None:
        checks.append(node_settings)
    checks += shims.shim_checks(registry.adapters, probe=options.limiter_probe)
    checks.append(storage.region_dir_check())
    if isinstance(options.ledger, Path):
        checks += [storage.ledger_check(options.ledger), conflicts.ledger_conflicts_check(options.ledger)]
    else:
        checks += database.postgresql_checks(options.ledger)
    checks.append(context.container_check())
    kubelet = context.kubelet_check(options.kubelet_dir)
    if kubelet is not None:
        checks.append(kubelet)
    environment = {
        "hami_devices": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "uid": os.geteuid(),
        "limiter_probe": options.limiter_probe,
    }
    return Report(checks, environment)


__all__ = ["Check", "Options", "Report", "Status", "run_doctor"]
