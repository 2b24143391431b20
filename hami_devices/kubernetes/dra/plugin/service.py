"""The kubelet's DRA service (``v1.DRAPlugin``) over ``NodePlugin``.

The kubelet names claims (namespace, name, uid); the allocation is read from a ``ClaimSource``, then
``NodePlugin.prepare`` books it in the node's ledger and writes the claim's CDI spec. Each claim gets
its own answer: one that fails carries its error text (the kubelet retries it) while the others of the
same call still succeed. Prepare and unprepare are idempotent because ``NodePlugin`` keys the
allocation by the claim uid in the durable ledger: a retry, a second kubelet call, or a call after a
plugin restart finds what was prepared before, and unpreparing a claim that is not prepared succeeds.
Calls run concurrently on the gRPC server's threads; ``NodePlugin`` keeps two calls for the same
claim apart and lets different claims proceed together.
"""

from __future__ import annotations

import logging
from typing import Any

from hami_devices.errors import HamiError
from hami_devices.kubernetes.dra.node import NodePlugin
from hami_devices.kubernetes.dra.plugin.claim_sources import ClaimSource
from hami_devices.kubernetes.dra.plugin.proto import dra_v1_pb2 as pb

log = logging.getLogger(__name__)

SERVICE = pb.DESCRIPTOR.services_by_name["DRAPlugin"]
SUPPORTED_VERSION = f"v1.{SERVICE.name}"
"""What the plugin lists in ``supported_versions``: the kubelet's name for the v1 DRA service."""


class DraService:
    def __init__(self, node: NodePlugin, claims: ClaimSource) -> None:
        self.node = node
        self.claims = claims

    def prepare_resources(
        self, request: pb.NodePrepareResourcesRequest, context: Any
    ) -> pb.NodePrepareResourcesResponse:
        response = pb.NodePrepareResourcesResponse()
        for claim in request.claims:
            answer = response.claims[claim.uid]
            try:
                answer.devices.extend(self._prepare(claim))
            except HamiError as exc:
                answer.error = f"{claim.namespace}/{claim.name}: {exc}"
            except Exception as exc:  # the kubelet retries; the server must answer the other claims
                log.exception("preparing claim %s/%s (%s)", claim.namespace, claim.name, claim.uid)
                answer.error = f"{claim.namespace}/{claim.name}: internal error: {exc!r}"
        return response

    def _prepare(self, claim: pb.Claim) -> list[pb.Device]:
        found = self.claims.claim(claim.namespace, claim.name, claim.uid)
        prepared = self.node.prepare(found)
        log.info("prepared claim %s/%s (%s) as %s", claim.namespace, claim.name, claim.uid, prepared.handle.id)
        return [
            pb.Device(request_names=[d.request], pool_name=d.pool, device_name=d.device, cdi_device_ids=d.cdi_ids)
            for d in prepared.devices
        ]

    def unprepare_resources(
        self, request: pb.NodeUnprepareResourcesRequest, context: Any
    ) -> pb.NodeUnprepareResourcesResponse:
        response = pb.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            answer = response.claims[claim.uid]
            try:
                released = self.node.unprepare(claim.uid)
                log.info("unprepared claim %s/%s (%s)%s", claim.namespace, claim.name, claim.uid,
                         "" if released else ": was not prepared")
            except HamiError as exc:
                answer.error = f"{claim.namespace}/{claim.name}: {exc}"
            except Exception as exc:
                log.exception("unpreparing claim %s/%s (%s)", claim.namespace, claim.name, claim.uid)
                answer.error = f"{claim.namespace}/{claim.name}: internal error: {exc!r}"
        return response
