"""The plugin-registration service the kubelet's plugin watcher calls on ``<driver>-reg.sock``.

The kubelet finds the socket in its ``plugins_registry`` directory, asks ``GetInfo`` (a DRA plugin,
its driver name, the endpoint of its DRA service, the gRPC services it offers), validates that, and
reports the outcome with ``NotifyRegistrationStatus``; the plugin keeps the last outcome.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from hami_devices.kubernetes.dra.plugin.proto import pluginregistration_v1_pb2 as pb

log = logging.getLogger(__name__)

SERVICE = pb.DESCRIPTOR.services_by_name["Registration"]
PLUGIN_TYPE = "DRAPlugin"


class RegistrationService:
    def __init__(self, driver: str, endpoint: str, versions: list[str]) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.versions = list(versions)
        self.registered = threading.Event()
        self.last_error: str | None = None

    def get_info(self, request: pb.InfoRequest, context: Any) -> pb.PluginInfo:
        return pb.PluginInfo(type=PLUGIN_TYPE, name=self.driver, endpoint=self.endpoint,
                             supported_versions=self.versions)

    def notify_registration_status(self, status: pb.RegistrationStatus, context: Any) -> pb.RegistrationStatusResponse:
        if status.plugin_registered:
            self.last_error = None
            self.registered.set()
            log.info("registered with the kubelet as %s at %s", self.driver, self.endpoint)
        else:
            self.last_error = status.error
            self.registered.clear()
            log.error("the kubelet refused the registration of %s: %s", self.driver, status.error)
        return pb.RegistrationStatusResponse()
