"""``@share(...)``: a Ray task or actor with its own hard share, reserved in Ray and granted by the plugin.

The decorator sets both halves: the Ray custom resources the share takes (so Ray
places it on a node that has them) and the ``hami`` runtime-env field (so the node's
plugin grants it and preloads the limiter).  Every ``.remote()`` call gets a fresh
share id: Ray installs a runtime env once per distinct value, so without it calls
with equal arguments would run inside one allocation.  Tasks run with
``max_calls=1``: the worker, and with it the share, ends with the task.

The wrapped function (or the actor's ``__init__``) first checks that it really runs
under its share: a node without the plugin would run the task with no limit at all.
"""

from __future__ import annotations

import functools
import inspect
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.integrations.ray.errors import ShareMissing
from hami_devices.integrations.ray.resources import share_resources
from hami_devices.integrations.ray.spec import FIELD, PRELOAD_VAR, SHARE_VAR, ShareSpec

SHARE_KEYS = frozenset(
    {"memory_mib", "cores", "count", "models", "vendors", "exclude_models", "uuids", "exclude_uuids",
     "precision", "numa_node", "task_type", "grant_timeout_s"}
)


def require_share() -> str:
    """The id of the share this worker runs under; ``ShareMissing`` if it has none or its limiter is not loaded."""
    share = os.environ.get(SHARE_VAR)
    if not share:
        raise ShareMissing(
            "this worker has no hami share: its node runs without the hami runtime-env plugin "
            "(start the node with `hami-devices ray start` or hami_devices.integrations.ray.init)"
        )
    preload = os.environ.get(PRELOAD_VAR)
    if preload and not _mapped(preload):
        raise ShareMissing(f"share {share}: the limiter {preload} is not loaded in this worker (pid {os.getpid()})")
    return share


def _mapped(library: str) -> bool:
    wanted = str(Path(library).resolve())
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return True  # no procfs to ask: trust the environment
    return any(line.endswith(wanted) for line in maps.splitlines())


def options(**share: Any) -> dict[str, Any]:
    """Ray options for one call with a fresh share: ``f.options(**options(memory_mib=1024, models=["T4"]))``.

    Share keys (``memory_mib``, ``cores``, ``count``, ``models``, ``vendors`` ...) go to the
    ``hami`` field and Ray's resources; ``runtime_env`` and ``resources`` given here are merged;
    any other key is passed to Ray as it is.
    """
    fields = {k: v for k, v in share.items() if k in SHARE_KEYS}
    rest = {k: v for k, v in share.items() if k not in SHARE_KEYS}
    field = {**{k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}, "share": uuid.uuid4().hex}
    spec = ShareSpec.parse(field)
    runtime_env = dict(rest.pop("runtime_env", None) or {})
    runtime_env[FIELD] = field
    resources = {**(rest.pop("resources", None) or {}), **share_resources(spec)}
    return {**rest, "runtime_env": runtime_env, "resources": resources}


class SharedRemote:
    """A Ray remote function or actor class whose every ``.remote()`` call gets its own share."""

    def __init__(self, remote: Any, share: dict[str, Any]) -> None:
        self._remote = remote
        self._share = share
        options(**share)  # a bad share fails at decoration, not at the first call

    def options(self, **more: Any) -> SharedRemote:
        return SharedRemote(self._remote, {**self._share, **more})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        from ray.remote_function import RemoteFunction

        from hami_devices.integrations.ray.elsewhere import may_go_elsewhere, placer

        call = options(**self._share)
        if isinstance(self._remote, RemoteFunction) and may_go_elsewhere(call):
            # a node that refuses the share leaves it to the others (an actor cannot be placed again)
            return placer().remote(self._remote, functools.partial(options, **self._share), args, kwargs)
        return self._remote.options(**call).remote(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._remote, name)


def share(**spec: Any) -> Callable[[Any], SharedRemote]:
    """Decorate a function or class as a Ray task or actor with a hard share of one accelerator model.

    ``@share(memory_mib=2048, cores=25, models=["T4"])`` on a function or class; other Ray
    options (``num_cpus``, ``max_restarts`` ...) may be given too.
    """
    import ray

    if "num_gpus" in spec:
        raise InvalidRequest("num_gpus", "Ray would set CUDA_VISIBLE_DEVICES over the share's own devices")

    def decorate(target: Any) -> SharedRemote:
        if callable(getattr(target, "remote", None)) and callable(getattr(target, "options", None)):
            # else Ray fails deep in pickling the remote it was handed, twenty lines from this cause
            raise InvalidRequest(
                "target", f"{_name(target)} is a ray.remote already: use @hray.share(...) "
                "in place of @ray.remote (Ray options such as num_cpus go into share(...))",
            )
        ray_only = {k: v for k, v in spec.items() if k not in SHARE_KEYS and k not in ("runtime_env", "resources")}
        share_only = {k: v for k, v in spec.items() if k not in ray_only}
        remote: Any
        if inspect.isclass(target):
            remote = ray.remote(**ray_only)(_guarded_class(target)) if ray_only else ray.remote(_guarded_class(target))
        else:
            remote = ray.remote(**{"max_calls": 1, **ray_only})(_guarded_function(target))
        return SharedRemote(remote, share_only)

    return decorate


def _name(target: Any) -> str:
    inner = getattr(target, "_function", None)  # a RemoteFunction keeps the function it wraps
    return str(getattr(inner, "__name__", None) or getattr(target, "__name__", None) or type(target).__name__)


def _guarded_function(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        require_share()
        return function(*args, **kwargs)

    return run


def _guarded_class(cls: type) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        require_share()
        cls.__init__(self, *args, **kwargs)  # type: ignore[misc]

    return type(cls.__name__, (cls,), {"__init__": __init__, "__doc__": cls.__doc__, "__module__": cls.__module__})
