"""One facade per audience: ``hami_devices`` (every user, every error), ``hami_devices.plugin`` (adapter
authors), ``hami_devices.scheduler`` (embedders); the names that moved still resolve, with a warning."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from types import ModuleType

import pytest

import hami_devices
import hami_devices.plugin
import hami_devices.scheduler
from hami_devices.errors import HamiError

from ..conftest import REPO_ROOT as REPO

# What ``hami_devices.__all__`` held before the facades were split (release 0.1.0): each must keep working.
BEFORE_THE_SPLIT = [
    "NOT_AVAILABLE", "AmbiguousEnvironment", "Capability", "ClusterState", "DefaultRule", "Device", "DeviceHandle",
    "DeviceInfo", "DeviceReadings", "DeviceTraits", "DeviceUnavailable", "DeviceUsage", "Engine", "Grant",
    "GrantRule", "HamiConfig", "HamiError", "Health", "HostResources", "InsufficientResources", "InvalidConfig",
    "InvalidInventory", "InvalidRequest", "Inventory", "Ledger", "LimiterError", "MemoryLedger", "Metrics",
    "NodeSpec", "PartitionProfile", "Placement", "Probe", "QueueRunner", "ReasonCode", "RequestPart",
    "ResourceRequest", "SimulatedDevice", "SqliteLedger", "TaskType", "UnknownAllocation", "VendorAdapter",
    "VendorLibraryError", "allocate", "build_engine", "configure_engine", "discover", "load_config",
    "load_inventory", "load_vendors", "load_workload", "prepare", "release", "unprepare",
]
FACADES = [hami_devices, hami_devices.plugin, hami_devices.scheduler]
CLASS_LINE = re.compile(r"^class (\w+)\(([^)]*)\)", re.MULTILINE)


def every_subclass(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= every_subclass(sub)
    return found


def test_every_error_of_the_core_is_exported_at_the_top() -> None:
    errors = {c for c in every_subclass(HamiError) if c.__module__ == "hami_devices.errors"} | {HamiError}
    assert len(errors) >= 16
    for cls in errors:
        assert cls.__name__ in hami_devices.__all__, cls
        assert getattr(hami_devices, cls.__name__) is cls


def test_the_core_defines_its_errors_in_one_module() -> None:
    """A new error of the core goes to hami_devices/errors.py, which the facade exports whole; the
    integrations and the Kubernetes pieces keep theirs beside the code that raises them."""
    names = {c.__name__ for c in every_subclass(HamiError)} | {"HamiError"}
    package = REPO / "hami_devices"
    elsewhere = []
    for path in package.rglob("*.py"):
        part = path.relative_to(package).parts[0]
        if part in ("integrations", "kubernetes") or path.name == "errors.py":
            continue
        for name, bases in CLASS_LINE.findall(path.read_text()):
            if {b.strip().rsplit(".", 1)[-1] for b in bases.split(",")} & names:
                elsewhere.append(f"{path.relative_to(REPO)}:{name}")
    assert not elsewhere


@pytest.mark.parametrize("facade", FACADES, ids=lambda m: m.__name__)
def test_each_public_name_resolves_without_a_warning_and_dir_lists_it(facade: ModuleType) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in facade.__all__:
            getattr(facade, name)
    assert dir(facade) == sorted(facade.__all__)


def test_the_top_level_keeps_what_every_user_needs_and_not_much_more() -> None:
    errors = {n for n in hami_devices.__all__ if isinstance(getattr(hami_devices, n), type)
              and issubclass(getattr(hami_devices, n), HamiError)}
    rest = set(hami_devices.__all__) - errors - {"ReasonCode", "__version__"}
    assert {"discover", "allocate", "release", "build_engine", "ResourceRequest", "DeviceHandle"} <= rest
    assert len(rest) <= 20, sorted(rest)


@pytest.mark.parametrize("name", BEFORE_THE_SPLIT)
def test_a_name_from_before_the_split_still_resolves(name: str) -> None:
    if name in hami_devices.__all__:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            getattr(hami_devices, name)
        return
    homes = [f for f in (hami_devices.plugin, hami_devices.scheduler) if name in f.__all__]
    assert len(homes) == 1, name
    home = homes[0]
    with pytest.warns(DeprecationWarning, match=rf"hami_devices\.{name} is deprecated: .*{home.__name__}"):
        old = getattr(hami_devices, name)
    assert old is getattr(home, name)
    with pytest.warns(DeprecationWarning):  # every use warns, not only the first
        getattr(hami_devices, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    for facade in FACADES:
        with pytest.raises(AttributeError, match="no_such_name"):
            facade.no_such_name  # noqa: B018  (the access is the test)


def test_importing_the_facades_loads_neither_numpy_nor_a_c_extension() -> None:
    code = (
        "import sys, hami_devices, hami_devices.plugin, hami_devices.scheduler\n"
        "loaded = [m for m in sys.modules if m == 'numpy' or m.endswith(('._native', '._fgd'))]\n"
        "print(loaded)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert run.stdout.strip() == "[]", run.stdout + run.stderr
