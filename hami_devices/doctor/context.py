"""Where doctor runs (a container, a Kubernetes pod), the SDK's compiled modules, and the configuration."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from hami_devices.config import load_config
from hami_devices.doctor.report import Check, failed, passed
from hami_devices.errors import HamiError

KUBELET_PLUGINS = Path("/var/lib/kubelet/plugins")
_RUNTIME_MARKERS = {"docker": "/.dockerenv", "podman": "/run/.containerenv"}
_CGROUP_WORDS = ("kubepods", "docker", "containerd", "libpod", "crio")


def native_check() -> Check:
    """The cffi modules ``pip install`` compiles: the limiter core and the fragmentation scorer."""
    missing = []
    for module in ("hami_devices._native", "hami_devices._fgd"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module} ({exc})")
    if missing:
        return failed(
            "sdk.native",
            f"compiled module(s) missing: {'; '.join(missing)}",
            "reinstall hami-devices where a C compiler is available (pip install --force-reinstall hami-devices)",
        )
    return passed("sdk.native", "the compiled modules _native (limiter core) and _fgd (fragmentation) load")


def container_check() -> Check:
    runtime = next((name for name, marker in _RUNTIME_MARKERS.items() if Path(marker).exists()), None)
    if runtime is None:
        try:
            cgroup = Path("/proc/1/cgroup").read_text(errors="replace")
        except OSError:
            cgroup = ""
        runtime = next((w for w in _CGROUP_WORDS if w in cgroup), None)
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if host:
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        return passed("context.container", f"in a Kubernetes pod (API server {host}:{port})", kubernetes=True)
    if runtime:
        return passed("context.container", f"in a container ({runtime})", container=runtime)
    return passed("context.container", "on the host (no container detected)")


def kubelet_check(folder: Path | None) -> Check | None:
    """The kubelet plugin folder a DRA node plugin registers through: checked when asked, or in a pod."""
    asked = folder is not None
    if not asked and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    folder = folder or KUBELET_PLUGINS
    if folder.is_dir():
        return passed("context.kubelet-plugins", f"{folder} is mounted", path=str(folder))
    if asked:
        return failed(
            "context.kubelet-plugins",
            f"{folder} is not here",
            "mount the kubelet's plugins and plugins_registry folders into the DRA driver's pod",
        )
    return passed(
        "context.kubelet-plugins",
        f"{folder} is not mounted: fine unless this pod runs the DRA node plugin (--kubelet-dir checks it)",
    )


def config_check(path: str | None) -> Check:
    if not path:
        return passed("config", "no configuration file: the defaults (policy binpack, no overcommit)")
    try:
        config = load_config(path)
    except HamiError as exc:
        return failed("config", str(exc), f"fix {path} (hami-devices config schema prints the JSON Schema)")
    except OSError as exc:
        return failed("config", f"{path}: {exc.strerror}", "give an existing, readable file")
    policy = getattr(config.scheduler, "policy", "?")
    return passed("config", f"{path} is valid (policy {policy})", path=path)
