"""The hand-off to the node: a scheduler's allocation carries no path of its host; ``prepare`` on the node
makes its limiter regions there and gives the environment with the node's paths; ``unprepare`` removes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices import limiter
from hami_devices.handoff import prepare, unprepare

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "batch-scheduler"
CLI = str(Path(sys.executable).with_name("hami-devices"))
SHARE = {"parts": [{"memory_mib": 3072, "cores": 30, "models": ["T4"]}]}
MIB = 1 << 20


@pytest.fixture
def ledger(tmp_path: Path) -> hd.SqliteLedger:
    return hd.SqliteLedger(tmp_path / "ledger.db")


def test_the_handle_carries_no_path_of_the_scheduler_host(small_inventory: Path, ledger: hd.SqliteLedger) -> None:
    handle = hd.build_engine(small_inventory, ledger=ledger).allocate(SHARE)
    stored = ledger.get(handle.id).model_dump_json()
    for host_path in (str(limiter.region_dir_path()), str(REPO / "hami_devices" / "libs")):
        assert host_path not in stored
    assert handle.regions == {} and "LD_PRELOAD" not in handle.env and "HAMI_REGION_PATH" not in handle.env
    assert handle.env["CUDA_VISIBLE_DEVICES"] == handle.grants[0].uuid
    assert list(limiter.region_dir_path().glob("*.region")) == []  # nothing made on the scheduler's host


def test_prepare_makes_the_region_on_the_node_and_unprepare_removes_it(
    small_inventory: Path, ledger: hd.SqliteLedger
) -> None:
    handle = hd.build_engine(small_inventory, ledger=ledger).allocate(SHARE)
    grant = handle.grants[0]
    envs = prepare(handle.id, ledger, node=grant.node)
    assert list(envs) == [f"{grant.node}/nvidia"]
    env = envs[f"{grant.node}/nvidia"]
    region = Path(env["HAMI_REGION_PATH"])
    assert region.parent == limiter.region_dir_path() and region.exists()
    assert Path(env["LD_PRELOAD"]).exists()
    assert env["CUDA_VISIBLE_DEVICES"] == grant.uuid and env["HAMI_DEVICE_MEMORY_LIMIT_0"] == "3072m"
    with limiter.Region.open(region) as opened:
        (record,) = opened.device_usage()
    assert (record.memory_limit_bytes, record.core_limit_pct) == (3072 * MIB, 30)
    inode = region.stat().st_ino
    assert prepare(handle.id, ledger, node=grant.node) == envs  # a retried prolog: the same, file kept
    assert region.stat().st_ino == inode
    assert unprepare(handle.id, node=grant.node) == [str(region)]
    assert not region.exists()
    assert unprepare(handle.id, node=grant.node) == []


def test_prepare_on_a_node_the_allocation_is_not_on(small_inventory: Path, ledger: hd.SqliteLedger) -> None:
    handle = hd.build_engine(small_inventory, ledger=ledger).allocate(SHARE)
    with pytest.raises(hd.InvalidRequest) as wrong:
        prepare(handle.id, ledger, node="l4-a")
    assert wrong.value.field == "node" and handle.grants[0].node in wrong.value.message
    with pytest.raises(hd.UnknownAllocation):
        prepare("no-such-allocation", ledger, node="l4-a")


def test_committing_here_keeps_the_single_host_behaviour(small_inventory: Path, ledger: hd.SqliteLedger) -> None:
    engine = hd.build_engine(small_inventory, ledger=ledger, prepare_on_node=False)
    handle = engine.allocate(SHARE)
    assert Path(handle.env["HAMI_REGION_PATH"]).exists() and "LD_PRELOAD" in handle.env
    # prepare on the same host finds the commit's region and leaves it as it is
    node = handle.grants[0].node
    assert prepare(handle.id, ledger, node=node)[f"{node}/nvidia"]["HAMI_REGION_PATH"] == handle.env["HAMI_REGION_PATH"]
    engine.release(handle)
    assert not Path(handle.env["HAMI_REGION_PATH"]).exists()


def test_the_prolog_and_epilog_hand_the_allocation_to_the_node(
    small_inventory: Path, ledger: hd.SqliteLedger, tmp_path: Path
) -> None:
    handle = hd.build_engine(small_inventory, ledger=ledger).allocate(SHARE)
    node = handle.grants[0].node
    env_file = tmp_path / "job.env"
    env = {**os.environ, "HAMI_HANDLE_ID": handle.id, "HAMI_LEDGER": str(ledger.path), "NODE_NAME": node,
           "HAMI_DEVICES_CLI": CLI, "HAMI_ENV_FILE": str(env_file)}
    prolog = subprocess.run(["bash", str(EXAMPLE / "prolog.sh")], env=env, capture_output=True, text=True,
                            timeout=120, check=True)
    exports = dict(line.removeprefix("export ").split("=", 1) for line in prolog.stdout.splitlines())
    region = Path(exports["HAMI_REGION_PATH"])
    assert region.exists() and region.parent == limiter.region_dir_path()
    assert exports["CUDA_VISIBLE_DEVICES"] == handle.grants[0].uuid
    assert env_file.read_text() == prolog.stdout
    # the job's shell gets exactly that environment
    job = subprocess.run(["bash", "-c", f"source {env_file}; echo $HAMI_REGION_PATH"], capture_output=True,
                         text=True, check=True)
    assert job.stdout.strip() == str(region)
    subprocess.run(["bash", str(EXAMPLE / "epilog.sh")], env=env, capture_output=True, text=True, timeout=120,
                   check=True)
    assert not region.exists() and not env_file.exists()
