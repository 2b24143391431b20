"""A share of one node's devices for one unit of a workflow: an Airflow task, a Spark executor.

The workflow engines hand the SDK a mapping: one request part (every ``RequestPart``
field) plus ``task_type``, ``queue`` (the hami queue the share is counted in) and
``grant_timeout_s`` (how long a refusal that may clear is retried before it is
reported).  ``NodeShares`` grants it through the node's durable ledger
(``hd.allocate``, with the workload's identity as metadata), and releases it.  A
refusal is a ``ShareRefused``: the SDK's reason codes, whether it can ever fit this
node, the node and the share's name.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from hami_devices.adapter import VendorAdapter
from hami_devices.allocation import allocate, release_from
from hami_devices.device import Device
from hami_devices.errors import AmbiguousEnvironment, InsufficientResources, InvalidRequest, UnknownAllocation
from hami_devices.integrations.node import NodeSetup
from hami_devices.ledger.opening import open_ledger
from hami_devices.models import DeviceHandle, HamiModel, RequestPart, ResourceRequest, TaskType

OWN_KEYS = ("task_type", "queue", "grant_timeout_s")
RETRY_S = 0.25


class ShareOptions(HamiModel):
    """The keys of a share that are not request-part fields."""

    task_type: TaskType = TaskType.BATCH
    queue: str = Field(default="default", min_length=1, description="the hami queue the share is counted in")
    grant_timeout_s: float = Field(
        default=0.0, ge=0, le=3600, description="how long a refusal that may clear is retried before it is reported"
    )


@dataclass(frozen=True)
class ShareSpec:
    """A validated share: one request part and its options."""

    part: RequestPart
    options: ShareOptions

    @classmethod
    def parse(cls, value: object, field: str = "hami") -> ShareSpec:
        """``InvalidRequest`` naming ``<field>.<key>`` for anything that does not validate."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise InvalidRequest(field, f"not JSON: {exc.msg}") from None
        if not isinstance(value, Mapping):
            raise InvalidRequest(field, f"expected a mapping, got {type(value).__name__}")
        raw = dict(value)
        own = {k: raw.pop(k) for k in OWN_KEYS if k in raw}
        try:
            return cls(RequestPart.model_validate(raw), ShareOptions.model_validate(own))
        except InvalidRequest as exc:
            raise InvalidRequest(f"{field}.{exc.field}", exc.message) from None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.part.model_dump(mode="json", exclude_defaults=True),
            **self.options.model_dump(mode="json", exclude_defaults=True),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def request(self, name: str) -> ResourceRequest:
        return ResourceRequest(
            name=name, task_type=self.options.task_type, queue=self.options.queue, parts=[self.part]
        )


class ShareRefused(InsufficientResources):
    """The node cannot grant the share: the SDK's reason codes are in ``codes`` and in the message."""

    def __init__(self, cause: InsufficientResources, *, node: str, share: str) -> None:
        self.node = node
        self.share = share
        super().__init__(
            f"hami: the share of {share} cannot be granted on node {node}: {cause.summary_message}",
            cause.reasons,
            permanent=cause.permanent,
            nearest=cause.nearest,
        )


class NodeShares:
    """Grants and releases shares of this node's devices in its durable ledger."""

    def __init__(self, setup: NodeSetup | None = None) -> None:
        self.setup = setup or NodeSetup.from_env()
        self.ledger = open_ledger(self.setup.ledger)
        self._devices: list[Device] | None = None

    def devices(self) -> list[Device]:
        if self._devices is None:
            self._devices = self.setup.devices(self.ledger)
        return self._devices

    def adapters(self) -> dict[str, VendorAdapter]:
        return {d.info.vendor: d.adapter for d in self.devices()}

    def node_name(self) -> str:
        devices = self.devices()
        return devices[0].info.node if devices else self.setup.node_name(self.ledger)

    def grant(
        self, spec: ShareSpec, *, name: str, metadata: Mapping[str, str], handle_id: str | None = None
    ) -> DeviceHandle:
        """The share, granted with the engine on this node; a refusal that may clear is retried for
        ``grant_timeout_s``, then raised as ``ShareRefused``."""
        request = spec.request(name)
        identity = {"queue": spec.options.queue, **metadata}
        deadline = time.monotonic() + spec.options.grant_timeout_s
        while True:
            try:
                handle = allocate(self.devices(), request, metadata=identity, handle_id=handle_id)
                break
            except InsufficientResources as exc:
                if exc.permanent or time.monotonic() >= deadline:
                    raise ShareRefused(exc, node=self.node_name(), share=name) from exc
            time.sleep(RETRY_S)
        try:
            handle.env  # noqa: B018  (one limiter, one region per process: one vendor per share)
        except AmbiguousEnvironment:
            self.release(handle.id)
            raise InvalidRequest(
                "vendors", "a process runs one vendor's limiter: a share must be of one vendor"
            ) from None
        return handle

    def release(self, handle_id: str, *, reason: str | None = None) -> bool:
        """Release the share; False when it was released already (by gc, or an earlier attempt)."""
        try:
            # the integration saw its workload end: a process left behind is revoked, not left holding the share
            release_from(self.ledger, handle_id, self.adapters(), reason=reason, ended=True)
        except UnknownAllocation:
            return False
        return True

    def close(self) -> None:
        self.ledger.close()


def share_environment(handle: DeviceHandle, share_var: str) -> dict[str, str]:
    """What a workload process of ``handle`` runs with: the allocation's environment (visible
    devices, limits, region, ``LD_PRELOAD`` of the limiter) and ``share_var`` naming it."""
    return {**handle.env, share_var: handle.id}


def environment_under(base: Mapping[str, str], share: Mapping[str, str]) -> dict[str, str]:
    """``base`` with ``share`` over it; the limiter is preloaded before any library ``base`` preloads."""
    merged = {**base, **share}
    ours, theirs = share.get("LD_PRELOAD"), base.get("LD_PRELOAD")
    if ours and theirs and ours not in theirs.split(":"):
        merged["LD_PRELOAD"] = f"{ours}:{theirs}"
    return merged
