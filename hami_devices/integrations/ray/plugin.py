"""The Ray runtime-env plugin that grants each ``hami`` share on the node Ray placed the worker.

Ray's runtime-env agent (one per node) calls, for each distinct runtime env:
``validate`` and ``get_uris`` (the share's URI), ``create`` once when the first worker
with that env starts (here: place with the engine and commit through the node's
ledger, ``hd.allocate``), ``modify_context`` for the worker's environment (visible
devices, limiter limits, region, ``LD_PRELOAD``), and ``delete_uri`` once no worker
references the env any more (the worker exited, was killed or crashed): the share is
released then.  ``create`` reports a size larger than Ray's URI cache, so Ray deletes
an unused share at once instead of keeping it cached.

Register it with ``RAY_RUNTIME_ENV_PLUGINS='[{"class": "hami_devices.integrations.ray.plugin.HamiPlugin"}]'``
in the environment of the node's Ray processes (``hami-devices ray start`` does).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from ray._private.runtime_env.context import RuntimeEnvContext
from ray._private.runtime_env.plugin import RuntimeEnvPlugin

from hami_devices.adapter import VendorAdapter
from hami_devices.allocation import allocate, release_from
from hami_devices.device import Device
from hami_devices.errors import AmbiguousEnvironment, InsufficientResources, InvalidRequest, UnknownAllocation
from hami_devices.integrations.ray.errors import ShareRefused
from hami_devices.integrations.ray.node import NodeSetup, node_name
from hami_devices.integrations.ray.ownership import handle_id, owner_key, reap
from hami_devices.integrations.ray.spec import FIELD, PRELOAD_VAR, SHARE_VAR, ShareSpec, digest_of
from hami_devices.ledger.opening import open_ledger
from hami_devices.models import DeviceHandle

EVICT_AT_ONCE = 1 << 62  # bytes: above any URI cache limit, so an unused share is deleted immediately
RETRY_S = 0.2

module_logger = logging.getLogger(__name__)


class HamiPlugin(RuntimeEnvPlugin):
    """Grants, injects and releases one ``hami`` share per distinct runtime env."""

    name = FIELD

    def __init__(self) -> None:
        self._setup = NodeSetup.from_env()
        self._owner = owner_key()
        self._lock = threading.Lock()
        self._devices: list[Device] | None = None
        self._ledger = open_ledger(self._setup.ledger)
        try:
            reap(self._ledger, {}, module_logger)
        except Exception:  # a broken ledger must not stop the node; each create will report it
            module_logger.exception("hami: could not reap the shares of earlier agents")

    @staticmethod
    def validate(runtime_env_dict: dict[str, Any]) -> None:
        ShareSpec.from_runtime_env(runtime_env_dict)

    def get_uris(self, runtime_env: Any) -> list[str]:
        # Ray asks before validating, where an exception is an opaque agent error: an invalid
        # field has no URI here and ``validate`` then names the field to the driver.
        try:
            return [ShareSpec.from_runtime_env(runtime_env).uri]
        except InvalidRequest:
            return []

    async def create(
        self, uri: str | None, runtime_env: Any, context: RuntimeEnvContext, logger: logging.Logger
    ) -> float:
        spec = ShareSpec.from_runtime_env(runtime_env)
        share = self._handle_id(uri or spec.uri)
        deadline = time.monotonic() + spec.options.grant_timeout_s
        while True:
            try:
                handle = await asyncio.to_thread(self._grant, spec, share)
                break
            except InsufficientResources as exc:
                # Ray frees a task's resources before its worker exits and the share is released:
                # a refusal that may clear is retried for a moment before it fails the task.
                if exc.permanent or time.monotonic() >= deadline:
                    raise ShareRefused(exc, node=self._node_name(), share=share) from None  # its reasons are in it
            await asyncio.sleep(RETRY_S)
        logger.info("hami: granted %s: %s", handle.id, [g.model_dump(mode="json") for g in handle.grants])
        return EVICT_AT_ONCE

    def modify_context(
        self, uris: list[str], runtime_env: Any, context: RuntimeEnvContext, logger: logging.Logger
    ) -> None:
        for uri in uris:
            handle = self._ledger.get(self._handle_id(uri))
            env = dict(handle.env)
            preload = env.get("LD_PRELOAD")
            if preload:
                theirs = context.env_vars.get("LD_PRELOAD")
                env["LD_PRELOAD"] = f"{preload}:{theirs}" if theirs else preload
                env[PRELOAD_VAR] = preload
            env[SHARE_VAR] = handle.id
            context.env_vars.update(env)
            logger.info("hami: worker environment of %s: %s", handle.id, sorted(env))

    def delete_uri(self, uri: str, logger: logging.Logger) -> float:
        share = self._handle_id(uri)
        try:
            # Ray drops a URI once no worker uses it: a process left behind is revoked, not left holding the share
            release_from(self._ledger, share, self._adapters(), ended=True)
            logger.info("hami: released %s", share)
        except UnknownAllocation:
            logger.warning("hami: %s was already released", share)
        return EVICT_AT_ONCE

    def _handle_id(self, uri: str) -> str:
        return handle_id(self._owner, digest_of(uri))

    def _node_devices(self) -> list[Device]:
        with self._lock:
            if self._devices is None:
                self._devices = self._setup.devices(self._ledger)
            return self._devices

    def _adapters(self) -> dict[str, VendorAdapter]:
        return {d.info.vendor: d.adapter for d in self._node_devices()}

    def _node_name(self) -> str:
        return node_name(self._setup, self._node_devices(), self._ledger)

    def _grant(self, spec: ShareSpec, share: str) -> DeviceHandle:
        """The share's allocation: the live one if Ray retried ``create``, else a new one from the engine."""
        try:
            return self._ledger.get(share)
        except UnknownAllocation:
            pass
        handle = allocate(self._node_devices(), spec.request(), handle_id=share)
        try:
            handle.env  # noqa: B018  (one limiter, one region per process: one vendor per share)
        except AmbiguousEnvironment:
            release_from(self._ledger, handle, self._adapters())
            raise InvalidRequest(
                f"{FIELD}.vendors", "a worker process runs one vendor's limiter: a share must be of one vendor"
            ) from None
        return handle
