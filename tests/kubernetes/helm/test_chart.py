"""The Helm chart ``deploy/helm/hami-devices``, by helm itself and a real API server.

- ``helm lint --strict`` passes with an inventory, and ``helm template`` refuses an enabled extender without one.
- ``helm template``'s objects: the DRA plugin and exporter DaemonSets, the scheduler with the extender beside it,
  the DeviceClasses (exactly ``hami-devices dra publish``'s), a PodMonitor and a PrometheusRule (holding the
  package's recording rules), RBAC; every one is created on Kubernetes 1.34.4's API server (the Prometheus
  operator's own CRDs installed first), and the scheduler configuration is accepted by kube-scheduler 1.34.4.
"""

from __future__ import annotations

import runpy
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_devices.kubernetes.dra.classes import device_classes
from tests.conftest import EXAMPLES, REPO_ROOT
from tests.kubernetes.cluster.controlplane import ControlPlane, binaries
from tests.kubernetes.helm.chart import CHART, Resources, helm, helm_binary, install_crd, operator_crds

pytestmark = pytest.mark.kubernetes_cluster

NAMESPACE = "hami-devices"
KUBERNETES = "1.34.4"  # the API server's: helm template's default (1.20) is below the chart's kubeVersion
RULES = REPO_ROOT / "hami_devices" / "observability" / "prometheus-rules.yml"


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="hh-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    return helm_binary()


@pytest.fixture(scope="module")
def values(workdir: Path) -> Path:
    inventory = yaml.safe_load((EXAMPLES / "dra" / "inventory.yaml").read_text())
    path = workdir / "values.yaml"
    path.write_text(yaml.safe_dump({"image": {"repository": "registry.invalid/hami-devices"},
                                    "extender": {"inventory": inventory}}))
    return path


@pytest.fixture(scope="module")
def rendered(helm_bin: Path, values: Path, workdir: Path) -> list[dict[str, Any]]:
    done = helm(helm_bin, "template", "hd", str(CHART), "--namespace", NAMESPACE, "-f", str(values),
                "--kube-version", KUBERNETES, home=workdir)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def apiserver(workdir: Path) -> Iterator[ControlPlane]:
    control = ControlPlane(workdir / "control", {})
    control.root.mkdir()
    try:
        control.bins = binaries()
        control.start_etcd_and_apiserver()
        yield control
    finally:
        control.stop()


def test_chart_lints_and_needs_an_inventory(helm_bin: Path, values: Path, workdir: Path) -> None:
    linted = helm(helm_bin, "lint", "--strict", str(CHART), "-f", str(values), home=workdir)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in linted.stdout
    bare = helm(helm_bin, "template", "hd", str(CHART), "--kube-version", KUBERNETES, home=workdir)
    assert bare.returncode != 0 and "extender.inventory.nodes" in bare.stderr
    alone = helm(helm_bin, "template", "hd", str(CHART), "--set", "extender.enabled=false",
                 "--kube-version", KUBERNETES, home=workdir)
    assert alone.returncode == 0, alone.stderr


def test_generated_files_are_the_packages() -> None:
    generate = runpy.run_path(str(REPO_ROOT / "deploy" / "helm" / "generate.py"))
    written = (CHART / "files" / "deviceclasses.yaml").read_text()
    assert written == generate["deviceclasses"](), "stale: run python deploy/helm/generate.py"
    assert (CHART / "files" / "prometheus-rules.yml").resolve() == RULES.resolve()


def test_rendered_objects(rendered: list[dict[str, Any]]) -> None:
    kinds = Counter(d["kind"] for d in rendered)
    assert kinds["DaemonSet"] == 2 and kinds["Deployment"] == 1
    assert kinds["PodMonitor"] == 1 and kinds["PrometheusRule"] == 1
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap"} <= set(kinds)
    classes = {d["metadata"]["name"]: d["spec"] for d in rendered if d["kind"] == "DeviceClass"}
    expected = {c["metadata"]["name"]: c["spec"] for c in device_classes(["nvidia", "ascend", "cambricon"])}
    assert classes == expected
    [rule] = [d for d in rendered if d["kind"] == "PrometheusRule"]
    assert rule["spec"]["groups"][0] == yaml.safe_load(RULES.read_text())["groups"][0]
    plugin = next(d for d in rendered if d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith("dra-plugin"))
    pod = plugin["spec"]["template"]["spec"]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/usr/lib/x86_64-linux-gnu", "/usr/local/Ascend/driver", "/usr/local/neuware"} <= mounts
    assert pod["containers"][0]["command"][:3] == ["/opt/hami-devices/bin/hami-devices", "dra", "plugin"]


def test_every_object_is_created_on_the_api_server(rendered: list[dict[str, Any]], apiserver: ControlPlane) -> None:
    resources = Resources(apiserver)
    for path in operator_crds():
        install_crd(resources, yaml.safe_load(path.read_text()))
    resources.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, NAMESPACE)
    for obj in rendered:
        created = resources.create(obj, NAMESPACE)
        assert (created["kind"], created["metadata"]["name"]) == (obj["kind"], obj["metadata"]["name"])
        read = apiserver.request("GET", resources.path(obj, NAMESPACE) + "/" + obj["metadata"]["name"])
        assert read["metadata"]["uid"] == created["metadata"]["uid"]


def test_scheduler_configuration_is_kube_schedulers(rendered: list[dict[str, Any]], apiserver: ControlPlane,
                                                    workdir: Path) -> None:
    [config_map] = [d for d in rendered if d["kind"] == "ConfigMap" and "kube-scheduler-config.yaml" in d["data"]]
    config = yaml.safe_load(config_map["data"]["kube-scheduler-config.yaml"])
    [extender] = config["extenders"]
    assert extender["urlPrefix"] == "http://127.0.0.1:8888/scheduler" and extender["bindVerb"] == "bind"
    # in its pod kube-scheduler uses the service account; here it needs a kubeconfig to start at all
    config["clientConnection"] = {"kubeconfig": str(apiserver.kubeconfig)}
    path = workdir / "scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    written = workdir / "scheduler-effective.yaml"
    done = subprocess.run([str(binaries()["kube-scheduler"]), "--config", str(path), "--write-config-to",
                           str(written)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    effective = yaml.safe_load(written.read_text())
    assert effective["profiles"][0]["schedulerName"] == "hami-scheduler"
    assert effective["extenders"][0]["managedResources"][0] == {"name": "nvidia.com/gpu", "ignoredByScheduler": True}
