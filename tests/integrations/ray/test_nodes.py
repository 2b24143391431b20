"""A real Ray cluster of three nodes on this machine, each with its own devices, ledger and fake GPUs.

The inventory below is split over three Ray nodes started with Ray's own ``cluster_utils.Cluster``.
Each node's processes (raylet, runtime-env agent, workers) get that node's part of it: its
``NODE_NAME``, a fake NVML fixture of its GPUs, its own fake-GPU state file (what the fake
libcuda counts), its own region folder and its own durable ledger.  Its Ray resources, labels and
environment are what ``hami-devices ray start --dry-run --json`` prints, run with that node's
environment, so each node's devices are found by a process that sees only that node's fake NVML.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hami_devices import limiter
from hami_devices.integrations import ray as hray
from hami_devices.ledger import SqliteLedger
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.ray

MIB = 1 << 20
FAKE_NVML = Path(limiter.fake_library("libcuda.so.1")).parent / "nvml" / "libnvidia-ml.so.1"
T4_MIB = 15360
A10_MIB = 23028  # NVIDIA A10 datasheet: 24 GB GDDR6, 23,028 MiB as NVML reports it

# The cluster's inventory: node -> its GPUs (NVML name, UUID, MiB, PCI device id, compute capability).
INVENTORY: dict[str, list[tuple[str, str, int, str, str]]] = {
    "alpha": [("Tesla T4", "GPU-a1a1a1a1-0000-4000-8000-000000000001", T4_MIB, "0x1EB810DE", "7.5")],
    "beta": [("Tesla T4", "GPU-b2b2b2b2-0000-4000-8000-000000000002", T4_MIB, "0x1EB810DE", "7.5")],
    "gamma": [("NVIDIA A10", "GPU-c3c3c3c3-0000-4000-8000-000000000003", A10_MIB, "0x223610DE", "8.6")],
}


def nvml_fixture(gpus: list[tuple[str, str, int, str, str]]) -> str:
    lines = ["driver_version = 535.161.08"]
    for index, (name, uuid, mib, pci, cc) in enumerate(gpus):
        lines += [
            "[gpu]", f"name = {name}", f"uuid = {uuid}", f"memory_mib = {mib}", "reserved_mib = 0",
            f"bus_id = 00000000:{0x3B + index:02X}:00.0", f"pci_device_id = {pci}", "numa = 0", f"cc = {cc}",
            f"arch = {7 if cc.startswith('8') else 6}", "pcie_switch = 0", "host_bridge = 0", "util = 0 0",
            "temp = 40", "power_mw = 25000",
        ]
    return "\n".join(lines) + "\n"


@dataclass
class Node:
    name: str
    folder: Path
    env: dict[str, str]
    ray_node: Any = None

    @property
    def ledger(self) -> SqliteLedger:
        return SqliteLedger(self.folder / "ledger.db")

    def hami(self, *args: str) -> Any:
        """Run the CLI as this node's own tools would, outside Ray (another client of its ledger)."""
        cut = args.index("--") if "--" in args else len(args)
        own = ["--ledger", str(self.folder / "ledger.db"), "--json"]
        done = subprocess.run(
            [sys.executable, "-m", "hami_devices.cli.main", *args[:cut], *own, *args[cut:]],
            env={**os.environ, **self.env}, capture_output=True, text=True, timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else None


def plan(node: Node) -> dict[str, Any]:
    planned: dict[str, Any] = node.hami("ray", "start", "--vendor", "nvidia", "--dry-run", "--", "--num-cpus", "2")
    return planned


@dataclass
class RayCluster:
    cluster: Cluster
    nodes: dict[str, Node]
    sessions: str

    def start(self, node: Node, wait: bool = True) -> None:
        """Start (or restart) a node with what `hami-devices ray start` runs: resources and labels from its
        devices, found by its own processes (each reads its own fake NVML), and the plugin's environment."""
        self.add(node, plan(node), wait)

    def add(self, node: Node, planned: dict[str, Any], wait: bool) -> None:
        flags = dict(a[2:].split("=", 1) for a in planned["command"][2:] if a.startswith("--") and "=" in a)
        labels = dict(pair.split("=", 1) for pair in flags["labels"].split(","))
        node.ray_node = self.cluster.add_node(
            wait=wait,
            num_cpus=2,
            include_dashboard=False,
            resources=json.loads(flags["resources"]),
            labels=labels,
            temp_dir=self.sessions,
            env_vars={**node.env, **planned["environment"]},
        )

    def ray_id(self, name: str) -> str:
        return str(self.nodes[name].ray_node.node_id)

    def name_of(self, ray_id: str) -> str:
        return next(n for n, node in self.nodes.items() if str(node.ray_node.node_id) == ray_id)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    root = tmp_path_factory.mktemp("ray-nodes")
    saved = dict(os.environ)
    os.environ.update(
        {
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
            # fewer processes on a small machine: no default workers started before any task asks for one
            "RAY_prestart_worker_first_driver": "0",
        }
    )
    os.environ.pop("LD_PRELOAD", None)
    nodes = {}
    for name, gpus in INVENTORY.items():
        folder = root / name
        (folder / "regions").mkdir(parents=True)
        (folder / "nvml.conf").write_text(nvml_fixture(gpus))
        nodes[name] = Node(
            name=name,
            folder=folder,
            env={
                "NODE_NAME": name,
                "HAMI_NVML_LIBRARY": str(FAKE_NVML),
                "HAMI_FAKE_NVML_FIXTURE": str(folder / "nvml.conf"),
                "HAMI_FAKE_GPU_STATE": str(folder / "fakegpu"),
                "HAMI_FAKE_DEVICES": str(len(gpus)),
                "HAMI_FAKE_MEMORY_MIB": ",".join(str(g[2]) for g in gpus),
                "LD_LIBRARY_PATH": str(FAKE_NVML.parent.parent),
                "HAMI_REGION_DIR": str(folder / "regions"),
            },
        )
    # Ray's socket paths may not pass 107 bytes: its sessions go to a short folder
    sessions = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    cluster = Cluster(initialize_head=False)
    state = RayCluster(cluster=cluster, nodes=nodes, sessions=sessions)
    try:
        with ThreadPoolExecutor(len(nodes)) as pool:  # each node's devices, found by its own processes
            plans = dict(zip(nodes, pool.map(plan, nodes.values()), strict=True))
        for index, (name, node) in enumerate(nodes.items()):  # the head first (the driver's node), then the rest
            state.add(node, plans[name], wait=index == 0)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="warning")
        yield state
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(sessions, ignore_errors=True)
        os.environ.clear()
        os.environ.update(saved)


def hami_view(resources: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in resources.items() if k.startswith("hami/")}


def wait_until(check: Any, timeout: float = 30.0, what: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out: {what() if what else ''}"
        time.sleep(0.1)


def live_shares(cluster: RayCluster) -> dict[str, list[str]]:
    return {name: [h.id for h in node.ledger.handles()] for name, node in cluster.nodes.items()}


def wait_all_released(cluster: RayCluster) -> None:
    """No share in any node's ledger, and Ray counts every node's resources free again."""
    def released() -> bool:
        if any(live_shares(cluster).values()):
            return False
        return hami_view(ray.available_resources()) == hami_view(ray.cluster_resources())

    wait_until(released, what=lambda: (live_shares(cluster), hami_view(ray.available_resources())))


def run_on_share(sizes_mib: list[int], hold: str | None = None) -> dict[str, Any]:
    """In the worker: allocate each size through the fake libcuda under the limiter; where and what it got."""
    from hami_conformance.workloads.cuda import _context, _driver

    from hami_devices.limiter import Region

    cu = _driver()
    _context(cu)
    codes = []
    for mib in sizes_mib:
        ptr = ctypes.c_uint64()
        codes.append(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib * MIB)))
    (usage,) = Region.open(os.environ["HAMI_REGION_PATH"]).device_usage()
    report = {
        "node": os.environ["NODE_NAME"],
        "ray_node": ray.get_runtime_context().get_node_id(),
        "share": hray.require_share(),
        "codes": codes,
        "region": os.environ["HAMI_REGION_PATH"],
        "limit_mib": usage.memory_limit_bytes // MIB,
        "used_mib": usage.memory_used_bytes // MIB,
    }
    if hold:  # keep the share until the test has looked at the cluster
        Path(hold, f"{os.getpid()}.ready").write_text(json.dumps(report))
        while not Path(hold, "go").exists():
            time.sleep(0.05)
    return report


def gone(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def held(folder: Path, refs: list[Any]) -> list[dict[str, Any]]:
    """The reports of tasks that hold their shares until told to go; a task that failed instead raises here."""
    def ready() -> bool:
        for done in ray.wait(refs, num_returns=len(refs), timeout=0)[0]:
            ray.get(done)  # finished before it held: its error, not a timeout
        return len(list(folder.glob("*.ready"))) == len(refs)

    wait_until(ready, timeout=120, what=lambda: (sorted(p.name for p in folder.iterdir()), free_in_ray()))
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.ready"))]


def free_in_ray() -> dict[str, float]:
    return hami_view(ray.available_resources())


def test_each_node_offers_its_own_devices(ray_cluster: RayCluster) -> None:
    offered = {ray_cluster.name_of(n["NodeID"]): hami_view(n["Resources"]) for n in ray.nodes() if n["Alive"]}
    t4 = {"hami/nvidia/memory_mib": T4_MIB, "hami/nvidia/cores": 100,
          "hami/nvidia/T4/memory_mib": T4_MIB, "hami/nvidia/T4/cores": 100}
    assert offered == {
        "alpha": t4,
        "beta": t4,
        "gamma": {"hami/nvidia/memory_mib": A10_MIB, "hami/nvidia/cores": 100,
                  "hami/nvidia/A10/memory_mib": A10_MIB, "hami/nvidia/A10/cores": 100},
    }
    labels = {ray_cluster.name_of(n["NodeID"]): n["Labels"].get("hami.io/node") for n in ray.nodes() if n["Alive"]}
    assert labels == {"alpha": "alpha", "beta": "beta", "gamma": "gamma"}


def test_shares_land_on_nodes_whose_devices_have_room(ray_cluster: RayCluster, tmp_path: Path) -> None:
    # 10 GiB T4 shares: one per T4 node at a time; an A10 share only on gamma
    t4 = hray.share(memory_mib=10240, cores=20, models=["T4"])(run_on_share)
    a10 = hray.share(memory_mib=10240, cores=20, models=["A10"])(run_on_share)
    refs = [t4.remote([8192], str(tmp_path)), t4.remote([8192], str(tmp_path)), a10.remote([8192], str(tmp_path))]
    reports = held(tmp_path, refs)
    assert sorted(r["node"] for r in reports) == ["alpha", "beta", "gamma"]
    for report in reports:  # the node Ray chose is the node whose ledger holds the share, on its own GPU
        assert ray_cluster.name_of(report["ray_node"]) == report["node"]
        (handle,) = ray_cluster.nodes[report["node"]].ledger.handles()
        assert handle.id == report["share"]
        assert [g.uuid for g in handle.grants] == [INVENTORY[report["node"]][0][1]]
    # a third T4 share has no room on any node: Ray holds it back until one ends
    third = t4.remote([8192])
    assert ray.wait([third], timeout=1.0)[0] == []
    (tmp_path / "go").write_text("")
    done = ray.get([*refs, third], timeout=90)
    assert [r["codes"] for r in done] == [[0]] * 4
    assert done[3]["node"] in ("alpha", "beta")
    wait_all_released(ray_cluster)
    assert not any(Path(r["region"]).exists() for r in done)


def test_two_tasks_on_one_card_each_see_their_own_limit(ray_cluster: RayCluster, tmp_path: Path) -> None:
    small = hray.share(memory_mib=2048, cores=30, models=["A10"])(run_on_share)
    large = hray.share(memory_mib=8192, cores=50, models=["A10"])(run_on_share)
    # within its share, then past it: the limiter refuses the second allocation of the small one only
    refs = [small.remote([1024, 2048], str(tmp_path)), large.remote([6144, 1024], str(tmp_path))]
    held(tmp_path, refs)
    gamma = ray_cluster.nodes["gamma"].ledger.handles()
    assert sorted(h.grants[0].memory_mib for h in gamma) == [2048, 8192]
    assert {h.grants[0].uuid for h in gamma} == {INVENTORY["gamma"][0][1]}  # one card, two shares
    (tmp_path / "go").write_text("")
    first, second = ray.get(refs, timeout=60)
    assert first["node"] == second["node"] == "gamma"
    assert first["codes"] == [0, 2]  # CUDA_SUCCESS, then CUDA_ERROR_OUT_OF_MEMORY
    assert (first["limit_mib"], first["used_mib"]) == (2048, 1024)
    assert second["codes"] == [0, 0]
    assert (second["limit_mib"], second["used_mib"]) == (8192, 7168)
    assert first["region"] != second["region"]
    wait_all_released(ray_cluster)


class Holder:
    def __init__(self) -> None:
        self.share = hray.require_share()

    def info(self) -> dict[str, Any]:
        return {"share": self.share, "node": os.environ["NODE_NAME"], "region": os.environ["HAMI_REGION_PATH"]}


def test_a_dead_raylet_leaves_no_share_behind(ray_cluster: RayCluster) -> None:
    gamma = ray_cluster.nodes["gamma"]
    actor = hray.share(memory_mib=4096, cores=20, models=["A10"])(Holder).remote()
    info = ray.get(actor.info.remote(), timeout=60)
    assert info["node"] == "gamma" and [h.id for h in gamma.ledger.handles()] == [info["share"]]
    # the node's raylet and agents are killed at once: nothing on the node gets to release the share
    ray_cluster.cluster.remove_node(gamma.ray_node, allow_graceful=False)
    agent = int(info["share"].split(".")[1].split("-")[0])  # a share's id names its agent's pid
    wait_until(lambda: gone(agent))
    with pytest.raises(ray.exceptions.RayActorError):  # its worker follows its raylet
        for _ in range(600):
            ray.get(actor.info.remote(), timeout=60)
            time.sleep(0.1)
    assert [h.id for h in gamma.ledger.handles()] == [info["share"]]
    # the node comes back as an operator restarts it: the dead agent's share is released first
    ray_cluster.start(gamma)
    ray_cluster.cluster.wait_for_nodes()
    assert gamma.ledger.handles() == []
    assert not Path(info["region"]).exists()
    wait_all_released(ray_cluster)
    again = hray.share(memory_mib=A10_MIB, models=["A10"])(run_on_share)  # the whole card is free again
    assert ray.get(again.remote([A10_MIB - 1024]), timeout=60)["codes"] == [0]
    wait_all_released(ray_cluster)


def test_a_refusal_on_one_node_lets_ray_try_another(ray_cluster: RayCluster) -> None:
    alpha = ray_cluster.nodes["alpha"]
    # most of alpha's T4 taken outside Ray: Ray still counts it free, alpha's plugin refuses
    outside = alpha.hami("allocate", "--vendor", "nvidia", "--memory", str(T4_MIB - 2048))
    try:
        task = hray.share(
            memory_mib=8192, models=["T4"], grant_timeout_s=0.5,
            # ask for alpha first (soft: Ray may go elsewhere), so the refusal really happens
            scheduling_strategy=NodeAffinitySchedulingStrategy(ray_cluster.ray_id("alpha"), soft=True),
        )(run_on_share)
        report = ray.get(task.remote([4096]), timeout=90)
        assert report["node"] == "beta" and report["codes"] == [0]
    finally:
        alpha.hami("release", outside["id"])
    wait_all_released(ray_cluster)


def test_a_share_every_node_refuses_fails_with_each_nodes_reasons(ray_cluster: RayCluster) -> None:
    # both T4s mostly taken outside Ray: alpha refuses, the task goes to beta, beta refuses, no T4 node is left
    nodes = [ray_cluster.nodes["alpha"], ray_cluster.nodes["beta"]]
    outside = [node.hami("allocate", "--vendor", "nvidia", "--memory", str(T4_MIB - 2048)) for node in nodes]
    try:
        task = hray.share(memory_mib=8192, models=["T4"], grant_timeout_s=0.5)(run_on_share)
        with pytest.raises(hray.ShareRefusedEverywhere) as failed:
            ray.get(task.remote([4096]), timeout=90)
        assert set(failed.value.refusals) == {"alpha", "beta"}
        for node in ("alpha", "beta"):  # its T4's reason (the node's own code comes with it)
            assert "CardInsufficientMemory" in failed.value.reasons[node]
        assert failed.value.permanent is False
        refused = hray.refusal(failed.value)
        assert refused is not None and refused["nodes"] and set(refused["nodes"]) == {"alpha", "beta"}
    finally:
        for node, handle in zip(nodes, outside, strict=True):
            node.hami("release", handle["id"])
    wait_all_released(ray_cluster)
