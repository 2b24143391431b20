"""``hami-devices discover --json`` through pynvml against the fake libnvidia-ml, one process per fixture."""

from __future__ import annotations

import json
import subprocess
from itertools import combinations
from pathlib import Path
from typing import Any

from nvidia_helpers import CLI, FAKE_NVML_OLD, discover, nvml_env, run_json

NVLINK_PAIRS = {(0, 3), (1, 2), (5, 6)}  # 12 active links each
DEGRADED_PAIR = (4, 7)  # 6 active links, 6 down


def _score(devices: list[dict[str, Any]], a: int, b: int) -> int:
    return int(devices[a]["topology"][devices[b]["uuid"]])


def test_h100_node_lists_eight_gpus_with_traits_and_nvlink_scores() -> None:
    devices = discover("h100-nvlink.conf")
    assert [d["index"] for d in devices] == list(range(8))
    for d in devices:
        assert d["vendor"] == "nvidia" and d["model"] == "H100" and d["health"] == "healthy"
        assert d["traits"]["model"] == "H100" and d["traits"]["generation"] == "hopper"
        assert d["memory_mib"] == 81559
        assert d["attributes"]["cuda_compute_capability"] == "9.0"
        assert d["attributes"]["architecture"] == "hopper"
        assert d["attributes"]["mig.mode"] == "disabled"
        assert "memory=v2" in d["attributes"]["nvml.versions"] and "pci=v3" in d["attributes"]["nvml.versions"]
        assert len(d["topology"]) == 7
        assert d["partitions"] == []  # MIG is disabled on these GPUs: no profile can be granted
    assert [d["numa_node"] for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert devices[0]["pci_bus_id"] == "00000000:18:00.0"
    nvlink = [_score(devices, a, b) for a, b in NVLINK_PAIRS]
    degraded = _score(devices, *DEGRADED_PAIR)
    pcie = [
        _score(devices, a, b)
        for a, b in combinations(range(8), 2)
        if (a, b) not in NVLINK_PAIRS and (a, b) != DEGRADED_PAIR
    ]
    assert min(nvlink) > degraded > max(pcie)  # NVLink outranks PCIe; more links outrank fewer
    assert _score(devices, 0, 1) > _score(devices, 0, 2) > _score(devices, 0, 4)  # switch > bridge > system
    assert all(_score(devices, a, b) == _score(devices, b, a) for a, b in combinations(range(8), 2))


def test_a30_node_lists_mig_instances_and_free_profiles(tmp_path: Path) -> None:
    assert all(d["partitions"] == [] for d in discover("a30-mig.conf"))  # mig-mode disabled: nothing to grant
    config = tmp_path / "strict.yaml"
    config.write_text("device-plugin:\n  mig-mode: strict\n")
    devices = discover("a30-mig.conf", config=config)
    mig, plain = devices
    assert plain["partitions"] == []  # MIG off on that GPU: its profiles cannot be granted
    assert mig["attributes"]["mig.mode"] == "enabled" and plain["attributes"]["mig.mode"] == "disabled"
    instances = json.loads(mig["attributes"]["mig.instances"])
    assert [(i["profile"], i["start"], i["size"]) for i in instances] == [("2g.12gb", 0, 2), ("1g.6gb", 2, 1)]
    assert all(i["uuid"].startswith("MIG-") for i in instances)
    assert len({i["uuid"] for i in instances}) == 2
    free = json.loads(mig["attributes"]["mig.free_profiles"])
    assert free == {"1g.6gb": 1, "1g.6gb+me": 1, "2g.12gb": 0, "2g.12gb+me": 0, "4g.24gb": 0}
    profiles = {p["name"]: p for p in mig["partitions"]}
    assert profiles["1g.6gb"]["max_instances"] == 4 and profiles["1g.6gb"]["placements"] == [0, 1, 2, 3]
    assert profiles["2g.12gb"]["cores"] == 50 and profiles["2g.12gb"]["native"]["compute_slices"] == 2
    assert profiles["4g.24gb"]["memory_mib"] == 23808
    assert mig["split_count"] == 4  # at most four MIG instances share an A30


def test_t4_node_has_two_numa_nodes_and_pcie_only_scores() -> None:
    devices = discover("t4-pcie.conf")
    assert [d["model"] for d in devices] == ["T4"] * 4
    assert [d["numa_node"] for d in devices] == [0, 0, 1, 1]
    assert all(d["partitions"] == [] and d["attributes"]["mig.mode"] == "n/a" for d in devices)
    assert "fp8" not in devices[0]["traits"]["peak_tflops"]
    same_switch, cross_numa = _score(devices, 0, 1), _score(devices, 0, 2)
    assert same_switch > cross_numa > 0
    assert _score(devices, 2, 3) == same_switch
    assert max(_score(devices, a, b) for a, b in combinations(range(4), 2)) < 50  # never NVLink-grade


def test_old_driver_discovers_with_not_available_fields() -> None:
    devices = discover("old-driver.conf", FAKE_NVML_OLD)
    assert len(devices) == 2
    for d in devices:
        assert d["model"] == "T4" and d["health"] == "healthy"
        assert d["numa_node"] is None  # nvmlDeviceGetNumaNodeId is absent
        assert d["attributes"]["architecture"] == "n/a"
        assert d["attributes"]["mig.mode"] == "n/a"
        assert d["attributes"]["nvml.versions"] == "memory=v1,pci=v2"  # fell back from v2 and v3
        assert d["pci_bus_id"] in ("00000000:3B:00.0", "00000000:5E:00.0")
        assert d["memory_mib"] == 15109


def test_lost_gpu_is_unhealthy_and_the_others_work() -> None:
    devices = discover("gpu-lost.conf")
    assert [d["health"] for d in devices] == ["healthy", "healthy", "unhealthy", "healthy"]
    lost = devices[2]
    assert "GPU is lost" in lost["health_reason"] and "15" in lost["health_reason"]
    assert lost["uuid"].endswith("02") and lost["topology"] == {}
    healthy = [devices[i] for i in (0, 1, 3)]
    for d in healthy:
        assert d["model"] == "A100-80GB" and d["numa_node"] == 0
        others = [o["uuid"] for o in healthy if o is not d]
        assert all(d["topology"][u] > 60 for u in others)  # NVSwitch links count as NVLink


def test_without_nvml_the_adapter_says_so_and_discovers_nothing(tmp_path: Path) -> None:
    """Asked for by name, a vendor whose library cannot load is an error naming the library (issue 39)."""
    env = nvml_env("t4-pcie.conf")
    library = tmp_path / "missing" / "libnvidia-ml.so.1"
    env["HAMI_NVML_LIBRARY"] = str(library)
    vendors = run_json([*CLI, "vendors", "--json"], env)["vendors"]
    nvidia = next(v for v in vendors if v["name"] == "nvidia")
    assert nvidia["loaded"] and not nvidia["hardware_available"]
    assert "missing" in nvidia["detail"] and nvidia["library"].endswith("libnvidia-ml.so.1")
    done = subprocess.run([*CLI, "discover", "--vendor", "nvidia", "--json"], env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)
    assert found["devices"] == [] and str(library) in found["missing"]["nvidia"]


def test_no_fixture_means_driver_not_loaded() -> None:
    env = nvml_env("t4-pcie.conf")
    env["HAMI_FAKE_NVML_FIXTURE"] = "/nonexistent/fixture.conf"
    vendors = run_json([*CLI, "vendors", "--json"], env)["vendors"]
    nvidia = next(v for v in vendors if v["name"] == "nvidia")
    assert not nvidia["hardware_available"] and "code 9" in nvidia["detail"]  # NVML_ERROR_DRIVER_NOT_LOADED
