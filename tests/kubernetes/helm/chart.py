"""What the chart tests run: helm (3.19.5, built from the Go module proxy by ``tests/kubernetes/gobuild.py``, cached),
the Prometheus operator's own CRDs (its Go module, from the same proxy), and a generic create of any object on an
API server by discovery.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT
from tests.kubernetes import gobuild
from tests.kubernetes.cluster.controlplane import ControlPlane, wait_for

MODULE = Path(__file__).resolve().parent
CHART = REPO_ROOT / "deploy" / "helm" / "hami-devices"
HELM_VERSION = "v3.19.5"
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
OPERATOR_CRDS = ("monitoring.coreos.com_podmonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml")


def helm_binary() -> Path:
    return gobuild.build(MODULE, "helm.sh/helm/v3/cmd/helm", f"helm-{HELM_VERSION}")


def helm(binary: Path, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` with its caches and configuration under ``home`` (never the user's)."""
    env = {"HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data"), "PATH": "/usr/bin:/bin", "HOME": str(home)}
    return subprocess.run([str(binary), *args], capture_output=True, text=True, env=env, timeout=120)


def operator_crds() -> list[Path]:
    """The PodMonitor and PrometheusRule CRDs as the Prometheus operator ships them (``go mod download``)."""
    done = subprocess.run(["go", "mod", "download", "-json", PROMETHEUS_OPERATOR], capture_output=True,
                          text=True, cwd=MODULE, timeout=600)
    if done.returncode != 0:
        raise gobuild.GoBuildError(f"go mod download {PROMETHEUS_OPERATOR}: {done.stdout}{done.stderr}")
    root = Path(json.loads(done.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    return [root / name for name in OPERATOR_CRDS]


class Resources:
    """Where an object of each kind is created, read from the API server's discovery."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        self._groups: dict[str, dict[str, tuple[str, bool]]] = {}

    def _kinds(self, api_version: str) -> dict[str, tuple[str, bool]]:
        found = self._groups.get(api_version)
        if found is None:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = self.control.request("GET", path)
            found = {r["kind"]: (r["name"], r["namespaced"]) for r in listing["resources"] if "/" not in r["name"]}
            self._groups[api_version] = found
        return found

    def path(self, obj: dict[str, Any], namespace: str) -> str:
        api = obj["apiVersion"]
        plural, namespaced = self._kinds(api)[obj["kind"]]
        prefix = "/api/v1" if api == "v1" else f"/apis/{api}"
        if namespaced:
            return f"{prefix}/namespaces/{obj['metadata'].get('namespace', namespace)}/{plural}"
        return f"{prefix}/{plural}"

    def create(self, obj: dict[str, Any], namespace: str) -> Any:
        return self.control.request("POST", self.path(obj, namespace), obj)

    def forget(self, api_version: str) -> None:
        """Read ``api_version`` afresh (after a CRD added kinds to it)."""
        self._groups.pop(api_version, None)


def install_crd(resources: Resources, crd: dict[str, Any]) -> None:
    """Create a CustomResourceDefinition and wait until the API server serves it."""
    resources.create(crd, "default")
    name = crd["metadata"]["name"]

    def established() -> bool:
        got = resources.control.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in (got.get("status") or {}).get("conditions") or [])

    wait_for(established, 60, f"CRD {name} established")
    group, version = crd["spec"]["group"], crd["spec"]["versions"][0]["name"]
    resources.forget(f"{group}/{version}")
