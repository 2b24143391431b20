"""The kubelet plugin's two gRPC servers on the kubelet's unix sockets.

- the DRA service on ``<plugin_dir>/dra.sock`` (default ``/var/lib/kubelet/plugins/hami-devices.io/``);
- the registration service on ``<registry_dir>/hami-devices.io-reg.sock`` (default
  ``/var/lib/kubelet/plugins_registry/``), created only once the DRA service answers, because the
  kubelet connects to the endpoint as soon as it has registered the plugin.

A socket file left by a plugin that died is removed before binding (the kubelet's watcher sees the old
registration go and the new one come). ``stop`` withdraws the registration first, then lets calls in
flight finish; prepared claims stay prepared (they live in the ledger), so a new plugin process carries on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes.dra import names
from hami_devices.kubernetes.dra.plugin import registration, service
from hami_devices.kubernetes.dra.plugin.proto import dra_v1_pb2, pluginregistration_v1_pb2

KUBELET_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
KUBELET_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes, the last one a NUL


@dataclass(frozen=True)
class SocketPaths:
    registration: Path
    dra: Path

    @classmethod
    def under(cls, registry_dir: str | Path | None = None, plugin_dir: str | Path | None = None,
              driver: str = names.DRIVER) -> SocketPaths:
        registry = Path(registry_dir) if registry_dir else KUBELET_REGISTRY_DIR
        plugin = Path(plugin_dir) if plugin_dir else KUBELET_PLUGINS_DIR / driver
        paths = cls(registry / f"{driver}-reg.sock", plugin / "dra.sock")
        for field, path in (("registry_dir", paths.registration), ("plugin_dir", paths.dra)):
            if len(str(path.absolute())) > MAX_SOCKET_PATH:
                raise InvalidRequest(field, f"socket path {path} is longer than a unix socket allows")
        return paths


def _handler(service_name: str, methods: Mapping[str, tuple[Callable[..., Any], Any, Any]]) -> Any:
    return grpc.method_handlers_generic_handler(
        service_name,
        {
            name: grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=request.FromString, response_serializer=response.SerializeToString
            )
            for name, (fn, request, response) in methods.items()
        },
    )


def _bind(server: grpc.Server, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a previous plugin's socket: nobody answers on it any more
    server.add_insecure_port(f"unix:{path.absolute()}")


class KubeletPlugin:
    """Serves ``DraService`` and ``RegistrationService``; ``start`` returns once both listen."""

    def __init__(self, dra: service.DraService, paths: SocketPaths, *, driver: str = names.DRIVER,
                 workers: int = 16) -> None:
        self.paths = paths
        self.dra = dra
        self.registration = registration.RegistrationService(
            driver, str(paths.dra.absolute()), [service.SUPPORTED_VERSION]
        )
        self._workers = workers
        self._dra_server: grpc.Server | None = None
        self._registration_server: grpc.Server | None = None

    def start(self) -> None:
        dra = dra_v1_pb2
        self._dra_server = grpc.server(ThreadPoolExecutor(self._workers, thread_name_prefix="dra"))
        self._dra_server.add_generic_rpc_handlers((_handler(service.SERVICE.full_name, {
            "NodePrepareResources": (self.dra.prepare_resources, dra.NodePrepareResourcesRequest,
                                     dra.NodePrepareResourcesResponse),
            "NodeUnprepareResources": (self.dra.unprepare_resources, dra.NodeUnprepareResourcesRequest,
                                       dra.NodeUnprepareResourcesResponse),
        }),))
        _bind(self._dra_server, self.paths.dra)
        self._dra_server.start()

        reg = pluginregistration_v1_pb2
        self._registration_server = grpc.server(ThreadPoolExecutor(2, thread_name_prefix="registration"))
        self._registration_server.add_generic_rpc_handlers((_handler(registration.SERVICE.full_name, {
            "GetInfo": (self.registration.get_info, reg.InfoRequest, reg.PluginInfo),
            "NotifyRegistrationStatus": (self.registration.notify_registration_status, reg.RegistrationStatus,
                                         reg.RegistrationStatusResponse),
        }),))
        _bind(self._registration_server, self.paths.registration)
        self._registration_server.start()

    def stop(self, grace_s: float = 5.0) -> None:
        if self._registration_server is not None:
            self._registration_server.stop(0).wait()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.paths.registration)
            self._registration_server = None
        if self._dra_server is not None:
            self._dra_server.stop(grace_s).wait()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.paths.dra)
            self._dra_server = None

    def wait(self) -> None:
        if self._dra_server is not None:
            self._dra_server.wait_for_termination()
