"""Issue 39, items 1 and 2: one node identity per ledger, and a vendor that cannot load is loud.

End to end through the CLI against the fake NVML (pynvml keeps one library per process, so each verb
runs in a process of its own); the ledger's record itself on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hami_devices
from hami_devices.errors import InvalidRequest
from hami_devices.integrations.node import NodeSetup
from hami_devices.integrations.spark import conf
from hami_devices.ledger import Ledger, open_ledger
from hami_devices.ledger.opening import LedgerTarget
from hami_devices.node_identity import node_for_ledger
from hami_devices.registry import path_variables, resolve_path_variables

FAKE_NVML = Path(hami_devices.__path__[0]).resolve() / "libs" / "fakes" / "nvml" / "libnvidia-ml.so.1"
FIXTURES = Path(__file__).resolve().parents[2] / "vendors" / "nvidia" / "tests" / "fixtures"
FIXTURE = FIXTURES / "t4-pcie.conf"
AGENT_NODE = "gpu-node-07"
VERBS = Path(__file__).with_name("verbs.py")


def _host() -> str:
    return "vm"


def test_the_ledger_keeps_the_node_it_serves(ledger_target: LedgerTarget) -> None:
    ledger = open_ledger(ledger_target)
    try:
        assert node_for_ledger(ledger, environ={"NODE_NAME": AGENT_NODE}, hostname=_host) == AGENT_NODE
    finally:
        ledger.close()
    again = open_ledger(ledger_target)  # another process: the record is in the ledger, not in this one
    try:
        assert node_for_ledger(again, environ={}, hostname=_host) == AGENT_NODE  # not the host's "vm"
        assert node_for_ledger(again, AGENT_NODE, environ={}, hostname=_host) == AGENT_NODE
        with pytest.raises(InvalidRequest) as flag:
            node_for_ledger(again, "other-node", environ={}, hostname=_host)
        assert flag.value.field == "--node-name"
        assert "'other-node'" in str(flag.value) and f"'{AGENT_NODE}'" in str(flag.value)
        assert f"--node-name {AGENT_NODE}" in str(flag.value)
        with pytest.raises(InvalidRequest) as env:
            node_for_ledger(again, environ={"NODE_NAME": "other-node"}, hostname=_host)
        assert env.value.field == "NODE_NAME" and f"NODE_NAME={AGENT_NODE}" in str(env.value)
    finally:
        again.close()


def test_a_fresh_ledger_takes_this_hosts_name(any_ledger: Ledger) -> None:
    assert node_for_ledger(any_ledger, environ={}, hostname=lambda: "Worker-3") == "worker-3"
    assert node_for_ledger(any_ledger, environ={}, hostname=lambda: "renamed") == "worker-3"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAMI_FAKE_", "HAMI_NVML", "NODE_NAME"))}
    env.update({"HAMI_FAKE_NVML_FIXTURE": str(FIXTURE), **extra})
    return env


def _verbs(*commands: list[str], env: dict[str, str], cwd: Path | None = None) -> list[dict[str, Any]]:
    """Each command's rc, stdout and stderr, all run in one process with ``env``."""
    done = subprocess.run([sys.executable, str(VERBS), json.dumps(commands)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


@pytest.fixture(scope="module")
def agent_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A ledger whose first writer was a node agent with NODE_NAME, holding one 3,000 MiB share."""
    ledger = tmp_path_factory.mktemp("agent") / "ledger.db"
    (done,) = _verbs(["allocate", "--ledger", str(ledger), "--memory", "3000", "--json"],
                     env=_env(HAMI_NVML_LIBRARY=str(FAKE_NVML), NODE_NAME=AGENT_NODE))
    assert done["rc"] == 0, done["stderr"]
    yield ledger


def test_a_shell_without_node_name_uses_the_agents_node(agent_ledger: Path) -> None:
    ledger = str(agent_ledger)
    monitor, granted, refused = _verbs(
        ["monitor", "--ledger", ledger, "--json"],
        ["allocate", "--ledger", ledger, "--memory", "100", "--json"],
        ["allocate", "--ledger", ledger, "--memory", "100", "--node-name", "other-node"],
        env=_env(HAMI_NVML_LIBRARY=str(FAKE_NVML)),  # no NODE_NAME: the host's name would differ
    )
    assert monitor["rc"] == 0, monitor["stderr"]
    rows = json.loads(monitor["stdout"])["metrics"]
    assert {r["node"] for r in rows} == {AGENT_NODE}
    assert [a["memory_limit_mib"] for r in rows for a in r["allocations"]] == [3000]  # the agent's share is listed
    assert granted["rc"] == 0, granted["stderr"]
    assert {g["node"] for g in json.loads(granted["stdout"])["grants"]} == {AGENT_NODE}
    assert refused["rc"] == 2
    assert "'other-node'" in refused["stderr"] and f"--node-name {AGENT_NODE}" in refused["stderr"]


def test_a_missing_library_is_named_by_every_verb(agent_ledger: Path, tmp_path: Path) -> None:
    gone = str(tmp_path / "moved" / "libnvidia-ml.so.1")
    ledger = str(agent_ledger)
    named, allocate, scrape = _verbs(
        ["discover", "--vendor", "nvidia"],
        ["allocate", "--ledger", ledger, "--memory", "100"],
        ["exporter", "--ledger", ledger, "--once"],
        env=_env(HAMI_NVML_LIBRARY=gone),
    )
    assert named["rc"] == 1 and gone in named["stderr"] and "named with --vendor" in named["stderr"]
    assert allocate["rc"] == 2
    assert "DeviceUnavailable" in allocate["stderr"] and gone in allocate["stderr"]
    assert scrape["rc"] == 0, scrape["stderr"]
    lines = scrape["stdout"].splitlines()
    assert 'hami_exporter_collector_up{collector="nvidia"} 0.0' in lines
    (error,) = [line for line in lines if line.startswith('hami_exporter_collector_error_info{collector="nvidia"')]
    assert gone in error and error.endswith(" 1.0")
    # nothing names NVIDIA now, but the ledger saw it on this node: not a node without GPUs
    (monitor,) = _verbs(["monitor", "--ledger", ledger, "--json"],
                        env={**_env(), "LD_LIBRARY_PATH": str(tmp_path)})
    assert monitor["rc"] == 1 and "vendor nvidia cannot be used: seen on this node before" in monitor["stderr"]
    held = open_ledger(agent_ledger)
    try:
        live = {(h.id, g.uuid, g.memory_mib) for h in held.handles() for g in h.grants}
    finally:
        held.close()
    # the shares are still listed (from the ledger) while their devices cannot be read
    unread = json.loads(monitor["stdout"])["unread"]
    assert {(u["allocation"], u["uuid"], u["memory_mib"]) for u in unread} == live and len(live) >= 1


def test_relative_paths_are_resolved_where_they_are_given(tmp_path: Path) -> None:
    given = {"HAMI_FAKE_NVML_FIXTURE": os.path.relpath(FIXTURE), "HAMI_NVML_LIBRARY": "libnvidia-ml.so.1",
             "HAMI_DCMI_LIBRARY": os.path.relpath(FAKE_NVML), "HAMI_OTHER": "x/y"}
    assert path_variables(given) == {
        "HAMI_FAKE_NVML_FIXTURE": str(FIXTURE),
        "HAMI_NVML_LIBRARY": "libnvidia-ml.so.1",  # a bare name is the loader's to find
        "HAMI_DCMI_LIBRARY": str(FAKE_NVML),
    }
    env = _env(HAMI_NVML_LIBRARY=os.path.relpath(FAKE_NVML), HAMI_FAKE_NVML_FIXTURE=os.path.relpath(FIXTURE))
    resolve_path_variables(env)
    elsewhere = tmp_path / "executor-work-folder"
    elsewhere.mkdir()
    (done,) = _verbs(["discover", "--vendor", "nvidia", "--json"], env={**env, "NODE_NAME": "n1"}, cwd=elsewhere)
    assert done["rc"] == 0, done["stderr"]
    assert len(json.loads(done["stdout"])["devices"]) == 4


def test_spark_executors_get_absolute_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_FAKE_NVML_FIXTURE", os.path.relpath(FIXTURE))
    settings = conf(memory_mib=1000)
    assert settings["spark.executorEnv.HAMI_FAKE_NVML_FIXTURE"] == str(FIXTURE)


def test_an_integration_names_the_ledgers_node_without_devices(tmp_path: Path) -> None:
    setup = NodeSetup(ledger=tmp_path / "ledger.db")
    ledger = open_ledger(setup.ledger)
    try:
        node_for_ledger(ledger, environ={"NODE_NAME": AGENT_NODE})
        assert setup.node_name(ledger) == AGENT_NODE  # was "localhost" when the node had no device
    finally:
        ledger.close()
