"""The compute policy of a share (issue 36: ``cap``, ``share``, or ``unlimited``), from the request and the
configuration to the grant, the workload's environment, the limiter region, the ledger and what operators read.

Expected values come from the definition: a part's own policy wins, else ``device-plugin.core-policy``, else
``cap``; ``HAMI_DEVICE_CORE_POLICY_<i>`` is emitted exactly where a core limit is; the region says ``share``
only for a share.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import hami_devices as hd
from hami_devices.cli.main import main
from hami_devices.config import config_schema, load_config, parse_config
from hami_devices.doctor.shims import clean_environment
from hami_devices.errors import InvalidConfig, InvalidRequest
from hami_devices.isolation import revoke_regions
from hami_devices.ledger import MemoryLedger, SqliteLedger
from hami_devices.limiter import Region
from hami_devices.models import DeviceHandle, RequestPart, ResourceRequest
from hami_devices.observability.exposition import TextRenderer
from hami_devices.observability.snapshot import Sampler

from .helpers import node, simulated

T4S = {"vendor": "nvidia", "model": "T4", "count": 4}


def t4s(config: dict[str, Any] | None = None, ledger: hd.Ledger | None = None) -> list[hd.Device]:
    return simulated(node("n", T4S), config=parse_config(config or {}), ledger=ledger or MemoryLedger())


def part(cores: int, policy: str | None = None, **more: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"memory_mib": 1024, "cores": cores, **more}
    if policy is not None:
        body["core_policy"] = policy
    return body


def region_policies(handle: DeviceHandle) -> list[tuple[int, str]]:
    """(core limit, policy) of each device of the handle's one region, as the limiter reads them back."""
    with Region.open(handle.env["HAMI_REGION_PATH"]) as region:
        return [(u.core_limit_pct, u.core_policy) for u in region.device_usage()][: len(handle.grants)]


def policy_variables(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("HAMI_DEVICE_CORE_POLICY")}


# ---------------------------------------------------------------------- the request and the configuration
def test_a_part_takes_the_three_policies_or_none() -> None:
    for policy in ("cap", "share", "unlimited"):
        assert RequestPart(cores=30, core_policy=policy).core_policy == policy
    assert RequestPart(cores=30).core_policy is None  # the configuration decides


def test_a_bad_policy_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidRequest) as err:
        ResourceRequest(parts=[{"cores": 30}, {"cores": 30, "core_policy": "force"}])
    assert err.value.field == "parts.1.core_policy"
    assert "cap" in err.value.message and "share" in err.value.message


def test_the_configuration_key_defaults_to_cap_and_names_itself_when_wrong(tmp_path: Path) -> None:
    assert parse_config({}).device_plugin.core_policy == "cap"
    assert parse_config({"device-plugin": {"core-policy": "share"}}).device_plugin.core_policy == "share"
    bad = tmp_path / "hami.yaml"
    bad.write_text(yaml.safe_dump({"device-plugin": {"core-policy": "sometimes"}}))
    with pytest.raises(InvalidConfig) as err:
        load_config(bad)
    assert err.value.field == "device-plugin.core-policy" and str(bad) in str(err.value)


def test_the_exported_schema_has_the_key_with_its_two_values() -> None:
    schema = config_schema()
    plugin = schema["properties"]["device-plugin"]
    section = schema["$defs"][plugin["$ref"].rsplit("/", 1)[1]] if "$ref" in plugin else plugin
    key = section["properties"]["core-policy"]
    assert key["enum"] == ["cap", "share"] and key["default"] == "cap"


# ---------------------------------------------------------------------- grant, environment and region
def test_the_part_wins_over_the_configuration_and_the_configuration_over_cap() -> None:
    devices = t4s({"device-plugin": {"core-policy": "share"}})
    handle = hd.allocate(devices, {"parts": [part(30), part(40, "cap"), part(20, "share")]})
    assert [(g.cores, g.core_policy) for g in handle.grants] == [(30, "share"), (40, "cap"), (20, "share")]
    assert policy_variables(handle.env) == {
        "HAMI_DEVICE_CORE_POLICY_0": "share", "HAMI_DEVICE_CORE_POLICY_1": "cap", "HAMI_DEVICE_CORE_POLICY_2": "share"}
    assert region_policies(handle) == [(30, "share"), (40, "cap"), (20, "share")]

    plain = hd.allocate(t4s(), {"parts": [part(30)]})  # nothing said anywhere: cap, as before
    assert plain.grants[0].core_policy == "cap" and plain.env["HAMI_DEVICE_CORE_POLICY_0"] == "cap"
    assert region_policies(plain) == [(30, "cap")]


def test_the_policy_variable_comes_only_with_a_core_limit() -> None:
    devices = t4s({"device-plugin": {"core-policy": "share"}})
    # no cores, an exclusive grant, a share whose compute is not paced: no core limit, nothing to keep
    handle = hd.allocate(devices, {"parts": [part(0), part(100), part(30, "unlimited"), part(25)]})
    env = handle.env
    assert [env[f"HAMI_DEVICE_CORE_LIMIT_{i}"] for i in range(4)] == ["0", "0", "0", "25"]
    assert policy_variables(env) == {"HAMI_DEVICE_CORE_POLICY_3": "share"}
    assert [env[f"CUDA_DEVICE_SM_LIMIT_{i}"] for i in range(4)] == ["0", "0", "0", "25"]  # HAMi-core's names agree
    assert [g.core_policy for g in handle.grants] == ["share", "share", "unlimited", "share"]
    assert [limit for limit, _ in region_policies(handle)] == [0, 0, 0, 25]
    # unlimited still books its cores: 30 % of that device is taken
    booked = {d.uuid: d.monitor().allocated_cores for d in devices}
    assert booked[handle.grants[2].uuid] == 30


def test_soft_isolation_limits_no_compute_whatever_the_policy() -> None:
    devices = t4s({"device-plugin": {"isolation-level": "soft", "core-policy": "share"}})
    handle = hd.allocate(devices, {"parts": [part(30, "share")]})
    assert handle.env["HAMI_DEVICE_CORE_LIMIT_0"] == "0" and policy_variables(handle.env) == {}


def test_the_policy_survives_json_and_the_durable_ledger(tmp_path: Path) -> None:
    ledger = SqliteLedger(tmp_path / "ledger.db")
    try:
        handle = hd.allocate(t4s(ledger=ledger), {"parts": [part(30, "share"), part(30, "unlimited")]})
        again = DeviceHandle.model_validate_json(handle.model_dump_json())
        assert again == handle and [g.core_policy for g in again.grants] == ["share", "unlimited"]
        assert [g.core_policy for g in ledger.get(handle.id).grants] == ["share", "unlimited"]
    finally:
        ledger.close()
    reopened = SqliteLedger(tmp_path / "ledger.db")
    try:
        assert [g.core_policy for g in reopened.get(handle.id).grants] == ["share", "unlimited"]
    finally:
        reopened.close()


def test_a_revoked_region_keeps_its_compute_policy() -> None:
    handle = hd.allocate(t4s(), {"parts": [part(30, "share"), part(40, "cap")]})
    assert revoke_regions(handle) == [handle.env["HAMI_REGION_PATH"]]
    with Region.open(handle.env["HAMI_REGION_PATH"]) as region:
        usage = region.device_usage()[:2]
    assert [(u.memory_limit_bytes, u.core_limit_pct, u.core_policy) for u in usage] == [
        (1, 30, "share"), (1, 40, "cap")]


# ---------------------------------------------------------------------- the CLI, monitor, exporter, doctor
def test_allocate_core_policy_flag_and_monitor_show_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"nodes": [node("n", T4S)]}))
    common = ["--inventory", str(inventory), "--ledger", str(tmp_path / "ledger.db")]
    assert main(["allocate", *common, "--memory", "1024", "--cores", "30", "--core-policy", "share", "--json"]) == 0
    handle = json.loads(capsys.readouterr().out)
    assert handle["grants"][0]["core_policy"] == "share"
    (env,) = handle["environments"].values()
    assert (env["HAMI_DEVICE_CORE_LIMIT_0"], env["HAMI_DEVICE_CORE_POLICY_0"]) == ("30", "share")

    assert main(["monitor", *common, "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["metrics"]
    shares = [a for m in metrics for a in m["allocations"]]
    assert [(a["handle_id"], a["cores_limit"], a["core_policy"]) for a in shares] == [(handle["id"], 30, "share")]

    assert main(["monitor", *common]) == 0
    table = capsys.readouterr().out.splitlines()
    header = next(line.split() for line in table if line.split()[:3] == ["NODE", "DEVICE", "ALLOCATION"])
    row = next(line.split() for line in table if handle["id"] in line)
    assert row[header.index("CORE_POLICY")] == "share"

    with pytest.raises(SystemExit):  # argparse's own refusal of a value outside the choices
        main(["allocate", *common, "--cores", "30", "--core-policy", "force"])
    assert "--core-policy" in capsys.readouterr().err


def test_the_exporter_labels_each_grant_with_its_policy() -> None:
    ledger = MemoryLedger()
    devices = t4s(ledger=ledger)
    handle = hd.allocate(devices, {"parts": [part(30, "share"), part(20)]})
    sampler = Sampler(devices, ledger)
    try:
        text = TextRenderer().render(sampler.snapshot()).decode()
    finally:
        sampler.close()
    infos = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == "hami_allocation_info"]
    assert sorted((s.labels["uuid"], s.labels["core_policy"]) for s in infos) == sorted(
        (g.uuid, g.core_policy) for g in handle.grants)
    assert {s.labels["core_policy"] for s in infos} == {"share", "cap"}


def test_doctor_probes_without_an_inherited_compute_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_DEVICE_CORE_POLICY_0", "share")
    monkeypatch.setenv("HAMI_DEVICE_CORE_POLICY", "cap")
    monkeypatch.setenv("GPU_CORE_UTILIZATION_POLICY", "force")
    monkeypatch.setenv("HAMI_UNRELATED_SETTING", "kept")
    env = clean_environment()
    assert not {"HAMI_DEVICE_CORE_POLICY_0", "HAMI_DEVICE_CORE_POLICY", "GPU_CORE_UTILIZATION_POLICY"} & set(env)
    assert env["HAMI_UNRELATED_SETTING"] == "kept"
