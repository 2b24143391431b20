"""A node's name: --node-name, the configuration, NODE_NAME (downward API), the host's name; never localhost.
End to end: devices discovered on (fake) hardware carry it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hami_devices
from hami_devices.config import HamiConfig
from hami_devices.errors import InvalidRequest
from hami_devices.node_identity import node_name

FAKE_NVML = Path(hami_devices.__path__[0]).resolve() / "libs" / "fakes" / "nvml" / "libnvidia-ml.so.1"
FIXTURE = Path(__file__).resolve().parents[2] / "vendors" / "nvidia" / "tests" / "fixtures" / "t4-pcie.conf"


def test_sources_in_order() -> None:
    config = HamiConfig.model_validate({"node-name": "from-config"})
    env = {"NODE_NAME": "from-env"}

    def host() -> str:
        return "Host-7.Example.Org"

    assert node_name("from-flag", config, environ=env, hostname=host) == "from-flag"
    assert node_name(None, config, environ=env, hostname=host) == "from-config"
    assert node_name(None, HamiConfig(), environ=env, hostname=host) == "from-env"
    assert node_name(None, None, environ={}, hostname=host) == "host-7.example.org"  # lower-cased, as the kubelet


@pytest.mark.parametrize("bad", ["localhost", "Localhost", "localhost.localdomain"])
def test_localhost_names_no_node(bad: str) -> None:
    with pytest.raises(InvalidRequest, match="NODE_NAME"):
        node_name(None, None, environ={}, hostname=lambda: bad)
    with pytest.raises(InvalidRequest, match="NODE_NAME"):
        node_name(None, None, environ={"NODE_NAME": "localhost"})


def test_not_a_node_name() -> None:
    with pytest.raises(InvalidRequest, match="--node-name"):
        node_name("Bad_Name")


def _discover(*args: str, env_node: str | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAMI_FAKE_", "HAMI_NVML", "NODE_NAME"))}
    env.update(HAMI_NVML_LIBRARY=str(FAKE_NVML), HAMI_FAKE_NVML_FIXTURE=str(FIXTURE))
    if env_node is not None:
        env["NODE_NAME"] = env_node
    done = subprocess.run([sys.executable, "-m", "hami_devices.cli.main", "discover", "--vendor", "nvidia",
                           "--json", *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d["node"] for d in json.loads(done.stdout)["devices"]]


def test_discovered_devices_carry_the_node_name() -> None:
    assert set(_discover(env_node="gpu-node-3")) == {"gpu-node-3"}  # the downward API's spec.nodeName
    assert set(_discover("--node-name", "gpu-node-9", env_node="gpu-node-3")) == {"gpu-node-9"}
