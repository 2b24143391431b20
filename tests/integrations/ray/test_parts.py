"""The Ray integration's parts without a Ray cluster: the share field, resources, ownership, refusals.

The plugin's hooks are called here as Ray's runtime-env agent calls them (same arguments,
Ray's own ``RuntimeEnvContext``), on the simulated back end with a real SQLite ledger.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray._private.runtime_env.context import RuntimeEnvContext

import hami_devices as hd
from hami_devices.cli.main import main
from hami_devices.config import parse_config
from hami_devices.integrations import ray as hray
from hami_devices.integrations.ray.errors import ShareMissing, ShareRefused
from hami_devices.integrations.ray.ownership import alive, handle_id, owner_key, owner_of, reap
from hami_devices.integrations.ray.plugin import EVICT_AT_ONCE, HamiPlugin
from hami_devices.integrations.ray.spec import ShareSpec

pytestmark = pytest.mark.ray
LOG = logging.getLogger("test")
TWO_T4 = {"nodes": [{"name": "n1", "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}]}]}
MIXED = {
    "nodes": [
        {"name": "n1", "devices": [{"vendor": "nvidia", "model": "T4", "count": 1}]},
        {"name": "n2", "devices": [{"vendor": "nvidia", "model": "L4", "count": 1},
                                   {"vendor": "cambricon", "model": "MLU370-X4", "count": 1}]},
    ]
}


def write_inventory(folder: Path, data: dict[str, object]) -> Path:
    path = folder / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# -- the hami field -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("hami.cores", {"memory_mib": 1, "cores": 101}),
        ("hami.memory_mib", {"memory_mib": -1}),
        ("hami.grant_timeout_s", {"memory_mib": 1, "grant_timeout_s": -1}),
        ("hami.colour", {"memory_mib": 1, "colour": "red"}),
        ("hami", "4096"),
    ],
)
def test_a_bad_share_names_its_field(field: str, bad: object) -> None:
    with pytest.raises(hd.InvalidRequest) as raised:
        ShareSpec.parse(bad)
    assert raised.value.field == field


def test_a_share_is_named_by_its_whole_field() -> None:
    one = ShareSpec.parse({"memory_mib": 1024, "models": ["T4"], "cores": 30})
    same = ShareSpec.parse({"cores": 30, "models": ["T4"], "memory_mib": 1024})
    other = ShareSpec.parse({"cores": 30, "models": ["T4"], "memory_mib": 1024, "share": "b"})
    assert one.uri == same.uri != other.uri
    assert one.request().parts[0].memory_mib == 1024


# -- Ray resources ------------------------------------------------------------------------------


def test_share_resources_take_from_the_model_and_the_vendor() -> None:
    spec = ShareSpec.parse({"memory_mib": 1024, "cores": 30, "count": 2, "models": ["Tesla T4"]})
    assert hray.share_resources(spec) == {
        "hami/nvidia/memory_mib": 2048.0,
        "hami/nvidia/cores": 60.0,
        "hami/nvidia/T4/memory_mib": 2048.0,
        "hami/nvidia/T4/cores": 60.0,
    }
    either = ShareSpec.parse({"memory_mib": 512, "models": ["T4", "L4"]})
    assert hray.share_resources(either) == {"hami/nvidia/memory_mib": 512.0}


@pytest.mark.parametrize(
    ("field", "share"),
    [
        ("hami.memory_mib", {"memory_percent": 50, "models": ["T4"]}),
        ("hami.vendors", {"memory_mib": 512}),
        ("hami.vendors", {"memory_mib": 512, "models": ["T4", "910B3"]}),
        ("hami.partition", {"memory_mib": 512, "models": ["A100-40GB"], "partition": "auto"}),
    ],
)
def test_a_share_ray_cannot_reserve_is_refused_by_name(field: str, share: dict[str, object]) -> None:
    with pytest.raises(hd.InvalidRequest) as raised:
        hray.share_resources(ShareSpec.parse(share))
    assert raised.value.field == field


def test_node_resources_follow_the_configured_memory_factor() -> None:
    config = parse_config({"device-plugin": {"memory-overcommit": 1.5, "core-scaling": 2.0}})
    devices = hd.discover(hd.inventory.parse_inventory(TWO_T4), config=config)
    offered = hray.node_resources(devices)
    per_device = int(devices[0].info.memory_mib * 1.5)
    assert offered["hami/nvidia/T4/memory_mib"] == offered["hami/nvidia/memory_mib"] == 2 * per_device
    assert offered["hami/nvidia/T4/cores"] == 400


shares = st.fixed_dictionaries(
    {
        "memory_mib": st.integers(1, 9000),
        "cores": st.integers(0, 70),
        "count": st.integers(1, 2),
        "models": st.just(["T4"]),
    }
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(shares, st.booleans()), min_size=1, max_size=12))
def test_ray_reserves_exactly_what_the_ledger_grants(steps: list[tuple[dict[str, object], bool]]) -> None:
    """For plain shares, Ray's free resources after any grants and releases are the SDK's."""
    devices = hd.discover(hd.inventory.parse_inventory(TWO_T4))
    live: list[tuple[hd.DeviceHandle, dict[str, float]]] = []
    for share, release_one in steps:
        before = hray.node_resources(devices)
        spec = ShareSpec.parse(share)
        try:
            handle = hd.allocate(devices, spec.request())
        except hd.InsufficientResources:
            assert hray.node_resources(devices) == before
            continue
        taken = hray.share_resources(spec)
        assert hray.node_resources(devices) == {k: v - taken.get(k, 0.0) for k, v in before.items()}
        live.append((handle, taken))
        if release_one:
            handle, taken = live.pop(0)
            before = hray.node_resources(devices)
            hd.release(handle)
            assert hray.node_resources(devices) == {k: v + taken.get(k, 0.0) for k, v in before.items()}


# -- the plugin's hooks, as the runtime-env agent calls them ---------------------------------------


@pytest.fixture
def node_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HAMI_INVENTORY", str(write_inventory(tmp_path, MIXED)))
    monkeypatch.setenv("HAMI_NODE", "n2")
    monkeypatch.setenv("HAMI_LEDGER", str(tmp_path / "ledger.db"))
    return tmp_path / "ledger.db"


def test_the_plugin_grants_injects_and_releases(node_env: Path) -> None:
    plugin = HamiPlugin()
    runtime_env = {"hami": {"memory_mib": 2048, "cores": 25, "models": ["L4"], "share": "x"}}
    HamiPlugin.validate(runtime_env)
    (uri,) = plugin.get_uris(runtime_env)
    assert plugin.get_uris({"hami": {"cores": 101}}) == []  # Ray asks first; validate then names the field
    context = RuntimeEnvContext(env_vars={"LD_PRELOAD": "/opt/theirs.so"})
    assert asyncio.run(plugin.create(uri, runtime_env, context, LOG)) == EVICT_AT_ONCE
    assert asyncio.run(plugin.create(uri, runtime_env, context, LOG)) == EVICT_AT_ONCE  # Ray retried: same share
    ledger = hd.SqliteLedger(node_env)
    (handle,) = ledger.handles()
    assert handle.grants[0].node == "n2" and handle.grants[0].model == "L4"
    plugin.modify_context([uri], runtime_env, context, LOG)
    env = context.env_vars
    assert env["HAMI_RAY_SHARE"] == handle.id
    assert env["CUDA_VISIBLE_DEVICES"] == handle.env["CUDA_VISIBLE_DEVICES"]
    assert env["HAMI_REGION_PATH"] == handle.env["HAMI_REGION_PATH"]
    assert env["LD_PRELOAD"] == f"{handle.env['LD_PRELOAD']}:/opt/theirs.so"
    assert Path(env["HAMI_REGION_PATH"]).exists()
    plugin.delete_uri(uri, LOG)
    assert ledger.handles() == []
    assert not Path(env["HAMI_REGION_PATH"]).exists()
    plugin.delete_uri(uri, LOG)  # a second delete finds nothing to release and says so


def test_the_plugin_waits_for_a_share_that_frees(node_env: Path) -> None:
    plugin = HamiPlugin()
    devices = hray.NodeSetup.from_env().devices()
    l4 = [d for d in devices if d.info.model == "L4"]
    blocker = hd.allocate(l4, {"parts": [{"memory_percent": 100, "models": ["L4"]}]})
    threading.Timer(0.5, hd.release, args=(blocker,)).start()
    runtime_env = {"hami": {"memory_mib": 1024, "models": ["L4"], "grant_timeout_s": 10}}
    (uri,) = plugin.get_uris(runtime_env)
    asyncio.run(plugin.create(uri, runtime_env, RuntimeEnvContext(), LOG))
    assert [h.request.parts[0].memory_mib for h in hd.SqliteLedger(node_env).handles()] == [1024]


def test_the_plugin_refuses_with_the_engines_reason_codes(node_env: Path) -> None:
    plugin = HamiPlugin()
    runtime_env = {"hami": {"memory_mib": 999_999, "models": ["L4"], "grant_timeout_s": 0}}
    (uri,) = plugin.get_uris(runtime_env)
    with pytest.raises(ShareRefused) as refused:
        asyncio.run(plugin.create(uri, runtime_env, RuntimeEnvContext(), LOG))
    assert codes_of(refused.value) >= {"CardInsufficientMemory"}
    assert hray.refusal(str(refused.value)) == hray.refusal(refused.value)
    assert hray.refusal(refused.value)["node"] == "n2"  # type: ignore[index]
    assert hd.SqliteLedger(node_env).handles() == []


def test_a_refusal_reaches_the_driver_as_one_readable_line(node_env: Path) -> None:
    """Ray's agent sends the driver the exception formatted with its traceback: a refusal is one line, the
    reason first, its codes after it for ``refusal()``."""
    plugin = HamiPlugin()
    runtime_env = {"hami": {"memory_mib": 999_999, "models": ["L4"], "grant_timeout_s": 0}}
    (uri,) = plugin.get_uris(runtime_env)
    with pytest.raises(ShareRefused) as refused:
        asyncio.run(plugin.create(uri, runtime_env, RuntimeEnvContext(), LOG))
    error = refused.value
    (line,) = "".join(traceback.format_exception(type(error), error, error.__traceback__)).splitlines()
    assert line.startswith("hami_devices.integrations.ray.errors.ShareRefused: hami: the share ")
    assert line.index("no L4 with") < line.index("CardInsufficientMemory") < line.index("hami-refusal: ")
    assert hray.refusal(line) == hray.refusal(error)
    assert refused.tb is not None  # the traceback is still there for logs and debuggers


def codes_of(error: BaseException) -> set[str]:
    detail = hray.refusal(error)
    assert detail is not None
    return set(detail["codes"])


def test_a_share_across_two_vendors_is_refused_and_nothing_stays(node_env: Path) -> None:
    plugin = HamiPlugin()
    # two devices of any vendor on n2 (an L4 and an MLU): one process cannot run both limiters
    runtime_env = {"hami": {"memory_mib": 512, "count": 2}}
    (uri,) = plugin.get_uris(runtime_env)
    with pytest.raises(hd.InvalidRequest, match="one vendor"):
        asyncio.run(plugin.create(uri, runtime_env, RuntimeEnvContext(), LOG))
    assert hd.SqliteLedger(node_env).handles() == []


# -- ownership: shares of a dead agent are reaped ---------------------------------------------------


def test_shares_of_a_gone_agent_are_released_and_others_kept(node_env: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = owner_key(gone.pid)
    gone.wait()
    assert not alive(dead) and alive(owner_key())
    devices = hray.NodeSetup.from_env().devices()
    small = {"parts": [{"memory_mib": 64, "models": ["L4"]}]}
    mine = hd.allocate(devices, small, handle_id=handle_id(owner_key(), "a"))
    orphan = hd.allocate(devices, small, handle_id=handle_id(dead, "b"))
    other = hd.allocate(devices, small)
    assert owner_of(orphan.id) == dead and owner_of(other.id) is None
    HamiPlugin()  # a new agent starts: it reaps
    assert {h.id for h in hd.SqliteLedger(node_env).handles()} == {mine.id, other.id}
    assert not Path(orphan.env["HAMI_REGION_PATH"]).exists()
    assert reap(hd.SqliteLedger(node_env), {}, LOG) == []


# -- the worker's own check ------------------------------------------------------------------------


def test_a_worker_without_its_share_or_limiter_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAMI_RAY_SHARE", raising=False)
    with pytest.raises(ShareMissing, match="no hami share"):
        hray.require_share()
    monkeypatch.setenv("HAMI_RAY_SHARE", "ray.1-2.abc")
    monkeypatch.setenv("HAMI_RAY_PRELOAD", "/nonexistent/libhami_cuda.so")
    with pytest.raises(ShareMissing, match="not loaded"):
        hray.require_share()
    loaded = next(
        line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if line.endswith(".so")
        or ".so." in line.rsplit("/", 1)[-1]
    )
    monkeypatch.setenv("HAMI_RAY_PRELOAD", loaded)
    assert hray.require_share() == "ray.1-2.abc"


def test_the_decorator_rejects_num_gpus() -> None:
    with pytest.raises(hd.InvalidRequest, match="num_gpus"):
        hray.share(memory_mib=512, models=["T4"], num_gpus=1)


# -- node set-up and the CLI ------------------------------------------------------------------------


def test_node_setup_travels_in_the_environment(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path, MIXED)
    setup = hray.NodeSetup(ledger=tmp_path / "l.db", inventory=inventory, node="n1", vendors=("nvidia",))
    env = setup.environment({"RAY_RUNTIME_ENV_PLUGINS": json.dumps([{"class": "other.Plugin"}])})
    assert json.loads(env["RAY_RUNTIME_ENV_PLUGINS"]) == [
        {"class": "other.Plugin"},
        {"class": "hami_devices.integrations.ray.plugin.HamiPlugin"},
    ]
    assert hray.NodeSetup.from_env(env) == hray.NodeSetup(
        ledger=(tmp_path / "l.db").resolve(), inventory=inventory.resolve(), node="n1", vendors=("nvidia",)
    )
    with pytest.raises(hd.InvalidRequest, match="name this Ray node"):
        hray.NodeSetup(ledger=tmp_path / "l.db", inventory=inventory).devices()
    with pytest.raises(hd.InvalidRequest, match="not a node"):
        hray.NodeSetup(ledger=tmp_path / "l.db", inventory=inventory, node="n9").devices()


def test_cli_prints_resources_and_the_start_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = str(write_inventory(tmp_path, MIXED))
    ledger = str(tmp_path / "l.db")
    assert main(["ray", "resources", "--inventory", inventory, "--node", "n1", "--ledger", ledger, "--json"]) == 0
    resources = json.loads(capsys.readouterr().out)["resources"]
    assert resources == {
        "hami/nvidia/T4/cores": 100.0,
        "hami/nvidia/T4/memory_mib": 15360.0,
        "hami/nvidia/cores": 100.0,
        "hami/nvidia/memory_mib": 15360.0,
    }
    args = ["ray", "start", "--inventory", inventory, "--node", "n1", "--ledger", ledger, "--dry-run", "--json"]
    assert main([*args, "--", "--head", "--num-cpus", "2"]) == 0
    started = json.loads(capsys.readouterr().out)
    assert started["command"][1:] == [
        "start", f"--resources={json.dumps(resources)}", "--labels=hami.io/node=n1", "--head", "--num-cpus", "2"
    ]
    assert started["environment"]["HAMI_NODE"] == "n1"
    assert main([*args, "--", "--resources", "{}"]) == 2
    assert "--resources" in capsys.readouterr().err
