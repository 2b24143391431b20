"""A Kubernetes 1.34.4 control plane on loopback for the kubernetes_cluster tests: etcd, kube-apiserver and
kube-scheduler, built from the Go module proxy by ``tests/kubernetes/gobuild.py`` (cached by version).

The API server serves TLS with a certificate signed by a CA made here (openssl), authenticates a static
token (``--token-auth-file``: one admin in ``system:masters``), and signs service-account tokens with a
key made here. No controller-manager and no kubelet run: tests create Nodes themselves, and the
``ServiceAccount`` admission plugin is off (no token controller makes the ``default`` service account).
The alpha/beta DRA features our slices use are switched on in the API server and the scheduler alike.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.kubernetes import gobuild

MODULE = Path(__file__).resolve().parent
VERSION = "v1.34.4"
PREFIX = f"k8s-{VERSION}"
FEATURE_GATES = "DRAConsumableCapacity=true,DRAPartitionableDevices=true"
TOKEN = "hami-devices-cluster-test-token"


class ApiError(AssertionError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def binaries() -> dict[str, Path]:
    """etcd, kube-apiserver and kube-scheduler, built (or found in the cache)."""
    return {
        "etcd": gobuild.build(MODULE, "./etcd", f"etcd-{PREFIX}"),
        "kube-apiserver": gobuild.build(MODULE, "k8s.io/kubernetes/cmd/kube-apiserver", f"kube-apiserver-{PREFIX}"),
        "kube-scheduler": gobuild.build(MODULE, "k8s.io/kubernetes/cmd/kube-scheduler", f"kube-scheduler-{PREFIX}"),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(directory: Path) -> dict[str, Path]:
    """A CA, the API server's serving certificate for 127.0.0.1, and the service-account key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    p = {name: directory / name for name in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt",
                                             "sa.key", "sa.pub", "san.ext")}
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(p["ca.key"]), "-out", str(p["ca.crt"]),
             "-days", "2", "-subj", "/CN=hami-devices-test-ca")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(p["server.key"]), "-out", str(p["server.csr"]),
             "-subj", "/CN=kube-apiserver")
    p["san.ext"].write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", str(p["server.csr"]), "-CA", str(p["ca.crt"]), "-CAkey", str(p["ca.key"]),
             "-CAcreateserial", "-out", str(p["server.crt"]), "-days", "2", "-extfile", str(p["san.ext"]))
    _openssl("genrsa", "-out", str(p["sa.key"]), "2048")
    _openssl("rsa", "-in", str(p["sa.key"]), "-pubout", "-out", str(p["sa.pub"]))
    return p


@dataclass
class ControlPlane:
    root: Path
    bins: dict[str, Path]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    api_port: int = 0
    kubeconfig: Path = Path()
    pki: dict[str, Path] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child holds it
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def log_tail(self, name: str, chars: int = 4000) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def start_etcd_and_apiserver(self, timeout_s: float = 180.0) -> None:
        self.pki = make_pki(self.root / "pki")
        client, peer = free_port(), free_port()
        self._start("etcd", [
            str(self.bins["etcd"]), "--data-dir", str(self.root / "etcd"), "--name", "test",
            "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"test=http://127.0.0.1:{peer}", "--quota-backend-bytes", str(1 << 30),
            "--log-level", "warn",
        ])
        tokens = self.root / "tokens.csv"
        tokens.write_text(f"{TOKEN},admin,admin-uid,system:masters\n")
        self.api_port = free_port()
        self._start("kube-apiserver", [
            str(self.bins["kube-apiserver"]), "--etcd-servers", f"http://127.0.0.1:{client}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(self.api_port),
            "--tls-cert-file", str(self.pki["server.crt"]), "--tls-private-key-file", str(self.pki["server.key"]),
            "--client-ca-file", str(self.pki["ca.crt"]), "--token-auth-file", str(tokens),
            "--authorization-mode", "RBAC", "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(self.pki["sa.pub"]),
            "--service-account-signing-key-file", str(self.pki["sa.key"]),
            "--service-cluster-ip-range", "10.96.0.0/24", "--disable-admission-plugins", "ServiceAccount",
            "--feature-gates", FEATURE_GATES, "--runtime-config", "resource.k8s.io/v1=true",
            "--enable-priority-and-fairness=false", "--profiling=false", "--allow-privileged=true",  # as kubeadm
        ])
        self.kubeconfig = self.root / "kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url,
                                                      "certificate-authority": str(self.pki["ca.crt"])}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }))
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.request("GET", "/readyz") == "ok":
                    break
            except (OSError, ApiError, json.JSONDecodeError):  # not up, or not ready yet
                pass
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise AssertionError(f"{name} exited ({proc.returncode}):\n{self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"kube-apiserver not ready:\n{self.log_tail('kube-apiserver')}")
            time.sleep(0.5)

    def start_scheduler(self, config: dict[str, Any]) -> None:
        """kube-scheduler with this configuration; its API client is the configuration's ``clientConnection``
        (with ``--config``, kube-scheduler ignores ``--kubeconfig``)."""
        config = {**config, "clientConnection": {**config.get("clientConnection", {}),
                                                 "kubeconfig": str(self.kubeconfig)}}
        path = self.root / "scheduler-config.yaml"
        path.write_text(yaml.safe_dump(config))
        self._start("kube-scheduler", [
            str(self.bins["kube-scheduler"]), "--config", str(path), "--feature-gates", FEATURE_GATES,
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--authentication-kubeconfig", str(self.kubeconfig), "--authorization-kubeconfig", str(self.kubeconfig),
            "--v", "3",
        ])

    # ------------------------------------------------------------------ API
    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {TOKEN}", "Content-Type": content_type, "Accept": "application/json",
        })
        context = ssl.create_default_context(cafile=str(self.pki["ca.crt"]))
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:  # the API server's Status says what it refused
            raise ApiError(exc.code, f"{method} {path}: {exc.code} {exc.read().decode(errors='replace')}") from None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def create(self, obj: dict[str, Any]) -> Any:
        return self.request("POST", collection_path(obj), obj)

    def get(self, obj: dict[str, Any]) -> Any:
        return self.request("GET", collection_path(obj) + "/" + obj["metadata"]["name"])

    def stop(self) -> None:
        for name in ("kube-scheduler", "kube-apiserver", "etcd"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


_PLURAL = {"Node": "nodes", "Pod": "pods", "Namespace": "namespaces", "ResourceSlice": "resourceslices",
           "DeviceClass": "deviceclasses", "ResourceClaim": "resourceclaims", "ServiceAccount": "serviceaccounts",
           "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "DaemonSet": "daemonsets"}
_CLUSTER_SCOPED = {"Node", "Namespace", "ResourceSlice", "DeviceClass", "ClusterRole", "ClusterRoleBinding"}


def collection_path(obj: dict[str, Any]) -> str:
    api = obj["apiVersion"]
    prefix = "/api/v1" if api == "v1" else f"/apis/{api}"
    plural = _PLURAL[obj["kind"]]
    if obj["kind"] in _CLUSTER_SCOPED:
        return f"{prefix}/{plural}"
    namespace = obj["metadata"].get("namespace", "default")
    return f"{prefix}/namespaces/{namespace}/{plural}"


def wait_for(check: Any, timeout_s: float, what: str, interval_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def env_without_proxy() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
