"""Where the plugin reads a claim's allocation: the kubelet names a claim, it does not send it.

- ``ApiServerClaims``: the ResourceClaim as the API server holds it (a kubeconfig, or the pod's service
  account in the cluster), read as plain JSON so that the allocation reaches ``NodePlugin`` exactly as
  the scheduler wrote it.
- ``DirectoryClaims``: allocated claims as files (YAML or JSON, as ``hami-devices dra allocate`` prints
  them), for a node that is fed claims without an API server.

Both answer ``ClaimNotFound`` when the claim is absent and refuse a claim whose uid is not the one the
kubelet asked for (a claim deleted and re-created under the same name is another claim).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import yaml

from hami_devices.errors import HamiError, InvalidRequest


class ClaimNotFound(HamiError):
    """The claim the kubelet named does not exist (any more) where the plugin reads claims."""


class ClaimSource(Protocol):
    def claim(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        """The ResourceClaim object (API JSON) with this uid; raise ``ClaimNotFound`` when there is none."""


def _check_uid(found: dict[str, Any], namespace: str, name: str, uid: str) -> dict[str, Any]:
    actual = (found.get("metadata") or {}).get("uid")
    if actual != uid:
        raise ClaimNotFound(f"claim {namespace}/{name} has uid {actual!r}, not the {uid!r} the kubelet asked for")
    return found


class ApiServerClaims:
    """Reads ``resource.k8s.io/v1`` ResourceClaims from the API server with the official client."""

    def __init__(self, *, kubeconfig: str | None = None, timeout_s: float = 10.0) -> None:
        from kubernetes import client, config

        if kubeconfig:
            self._api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        else:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            self._api = client.ApiClient(configuration)
        self.timeout_s = timeout_s

    def claim(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        from kubernetes.client import ResourceV1Api
        from kubernetes.client.exceptions import ApiException

        try:
            # the raw JSON, not the client's model: the allocation reaches NodePlugin as the API server holds it
            # (with _preload_content=False the call returns the HTTP response, not the model its stub declares)
            response: Any = ResourceV1Api(self._api).read_namespaced_resource_claim(
                name, namespace, _preload_content=False, _request_timeout=self.timeout_s
            )
        except ApiException as exc:
            if exc.status == 404:
                raise ClaimNotFound(f"claim {namespace}/{name} not found") from None
            raise HamiError(f"reading claim {namespace}/{name}: {exc.status} {exc.reason}") from None
        found: dict[str, Any] = json.loads(response.data)
        return _check_uid(found, namespace, name, uid)

    def close(self) -> None:
        self._api.close()


class DirectoryClaims:
    """Claims from ``*.yaml``, ``*.yml`` and ``*.json`` files in a directory, read afresh on each request
    (a file written after the plugin started is found)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise InvalidRequest("claims_dir", f"{self.directory} is not a directory")

    def _objects(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in sorted(self.directory.iterdir()):
            if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
                continue
            try:
                docs = list(yaml.safe_load_all(path.read_text()))
            except (OSError, yaml.YAMLError):
                continue  # a file being written now is read on the kubelet's retry
            for doc in docs:
                items = doc if isinstance(doc, list) else (doc or {}).get("items", [doc])
                out.extend(o for o in items if isinstance(o, dict) and o.get("kind") == "ResourceClaim")
        return out

    def claim(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        candidates = [
            o for o in self._objects()
            if (o.get("metadata") or {}).get("name") == name
            and ((o.get("metadata") or {}).get("namespace") or "default") == namespace
        ]
        if not candidates:
            raise ClaimNotFound(f"claim {namespace}/{name} not found in {self.directory}")
        by_uid = [o for o in candidates if (o.get("metadata") or {}).get("uid") == uid]
        return _check_uid(by_uid[0] if by_uid else candidates[0], namespace, name, uid)
