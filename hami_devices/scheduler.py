"""What a scheduler that embeds the SDK uses: an extender, a batch system, a queue.

Build one engine over an inventory and a configuration (``build_engine``; with ``ledger=`` it also
commits: ``engine.allocate``, ``commit``, ``release``, ``refresh``), decide with it, and hand each
allocation to the node that runs the workload (``prepare``, ``unprepare``).  docs/embedding.md walks
through it.

An engine's ``rank``, ``place`` and ``try_place`` change nothing; ``engine.observe(request)`` is the
one step that teaches its learning scorers, and a scheduler calls it once for each request it
decides (``engine.allocate`` and ``engine.schedule`` do), never for a what-if.  ``engine.assume``
holds a placement in the engine's cluster without a ledger.

Importing this module loads neither numpy nor a C extension: the engine, the cluster state, the
queue runner and the node hand-off load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hami_devices.config import HamiConfig, load_config
from hami_devices.inventory import Inventory, NodeSpec, load_inventory
from hami_devices.lazy_names import resolver
from hami_devices.models import RequestPart, ResourceRequest, TaskType
from hami_devices.registry import load_vendors
from hami_devices.workload import load_workload

if TYPE_CHECKING:
    from hami_devices.assembly import build_engine, configure_engine
    from hami_devices.handoff import prepare, unprepare
    from hami_devices.queueing.runner import QueueRunner
    from hami_devices.scheduling import ClusterState, Engine, Placement

_ON_FIRST_USE = {
    "build_engine": "hami_devices.assembly",
    "configure_engine": "hami_devices.assembly",
    "Engine": "hami_devices.scheduling",
    "ClusterState": "hami_devices.scheduling",
    "Placement": "hami_devices.scheduling",
    "QueueRunner": "hami_devices.queueing.runner",
    "prepare": "hami_devices.handoff",
    "unprepare": "hami_devices.handoff",
}

_resolve = resolver(__name__, globals(), _ON_FIRST_USE)


def __getattr__(name: str) -> Any:
    """The engine and its neighbours, imported when first asked for (they bring numpy and the C scorer)."""
    value = _resolve(name)
    if name == "Engine":
        _keep_deprecated_builders(value)
    return value


def __dir__() -> list[str]:
    """The public names, those loaded on first use included."""
    return sorted(__all__)


def _keep_deprecated_builders(engine: Any) -> None:
    """``Engine.from_config`` and ``Engine.configured``, which now live one layer up (``build_engine``)."""
    import warnings

    from hami_devices.assembly import build_engine, configure_engine

    def deprecated(builder: Any, old: str) -> Any:
        def call(cls: Any, *args: Any, **kwargs: Any) -> Any:
            warnings.warn(f"Engine.{old} is deprecated: use hami_devices.{builder.__name__}", DeprecationWarning,
                          stacklevel=2)
            return builder(*args, **kwargs)

        return classmethod(call)

    engine.from_config = deprecated(build_engine, "from_config")
    engine.configured = deprecated(configure_engine, "configured")


__all__ = [
    "ClusterState",
    "Engine",
    "HamiConfig",
    "Inventory",
    "NodeSpec",
    "Placement",
    "QueueRunner",
    "RequestPart",
    "ResourceRequest",
    "TaskType",
    "build_engine",
    "configure_engine",
    "load_config",
    "load_inventory",
    "load_vendors",
    "load_workload",
    "prepare",
    "unprepare",
]
