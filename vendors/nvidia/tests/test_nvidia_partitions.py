"""The MIG catalog and planner (pure), the simulated back end, and the limiter variables."""

from __future__ import annotations

import itertools

import pytest
from hami_nvidia import partitions
from hami_nvidia.adapter import NvidiaAdapter
from hami_nvidia.partitions import MigInstance

import hami_devices
from hami_devices.config import parse_config
from hami_devices.errors import InsufficientResources
from hami_devices.ledger import MemoryLedger
from hami_devices.models import DeviceInfo, Grant


@pytest.mark.parametrize("model", ["A30", "A100-40GB", "A100-80GB", "H100", "H200"])
def test_catalog_is_consistent(model: str) -> None:
    g = partitions.geometry_for(model)
    assert g is not None
    full = max(g.profiles, key=lambda p: p.compute_slices)
    assert full.compute_slices == g.compute_slices and g.cores(full) == 100
    for p in g.profiles:
        assert all(s + p.memory_slices <= g.memory_slices for s in p.placements)
        assert p.memory_mib <= full.memory_mib
        assert p.name.startswith(f"{p.compute_slices}g.")
    # Every layout the hardware allows keeps the core and memory accounting within the whole GPU.
    for layout in _maximal_layouts(g):
        assert sum(g.cores(p) for p in layout) <= 100
        assert sum(p.memory_mib for p in layout) <= full.memory_mib + 512


def _maximal_layouts(g: partitions.MigGeometry) -> list[list[partitions.MigProfile]]:
    plain = [p for p in g.profiles if not p.media_extensions]
    layouts = []
    for size in range(1, g.compute_slices + 1):
        for combo in itertools.combinations_with_replacement(plain, size):
            if sum(p.compute_slices for p in combo) > g.compute_slices:
                continue
            if partitions.packs(g, combo):
                layouts.append(list(combo))
    return layouts


def test_catalog_names_per_model() -> None:
    names = {m: [p.name for p in partitions.CATALOG[m].profiles] for m in partitions.CATALOG}
    assert names["A30"] == ["1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"]
    assert "1g.5gb" in names["A100-40GB"] and "7g.40gb" in names["A100-40GB"]
    assert "1g.10gb" in names["H100"] and "1g.20gb" in names["H100"] and "7g.80gb" in names["H100"]
    assert "1g.18gb" in names["H200"] and "7g.141gb" in names["H200"]
    h100 = partitions.H100
    assert h100.profile("1g.10gb").placements == (0, 1, 2, 3, 4, 5, 6)  # type: ignore[union-attr]
    assert h100.profile("3g.40gb").placements == (0, 4)  # type: ignore[union-attr]


def test_planner_picks_the_smallest_fitting_profile() -> None:
    g = partitions.H100
    assert partitions.plan_new_instance(g, [], [], 5000, 0).profile.name == "1g.10gb"  # type: ignore[union-attr]
    assert partitions.plan_new_instance(g, [], [], 15000, 0).profile.name == "1g.20gb"  # type: ignore[union-attr]
    assert partitions.plan_new_instance(g, [], [], 15000, 20).profile.name == "2g.20gb"  # type: ignore[union-attr]
    assert partitions.plan_new_instance(g, [], [], 30000, 0).profile.name == "3g.40gb"  # type: ignore[union-attr]
    assert partitions.plan_new_instance(g, [], [], 10**6, 0) is None


def test_planner_respects_existing_placements() -> None:
    g = partitions.A100_80GB
    three_high = [MigInstance("3g.40gb", 4, 4)]
    placed = partitions.plan_new_instance(g, three_high, [], 30000, 0)
    assert placed is not None and (placed.profile.name, placed.start) == ("3g.40gb", 0)
    one_low = [MigInstance("1g.10gb", 0, 1)]
    placed = partitions.plan_new_instance(g, one_low, [], 0, 0, "4g.40gb")
    assert placed is None  # 4g only starts at slice 0
    placed = partitions.plan_new_instance(g, one_low, [], 0, 0, "3g.40gb")
    assert placed is not None and placed.start == 4
    # pending (placement not known yet) instances must still fit with the new one
    assert partitions.plan_new_instance(g, [], ["4g.40gb"], 0, 0, "3g.40gb") is not None
    assert partitions.plan_new_instance(g, [], ["4g.40gb", "3g.40gb"], 0, 0, "1g.10gb") is None


def test_free_profiles_next_to_existing() -> None:
    g = partitions.A30
    existing = [MigInstance("2g.12gb", 0, 2), MigInstance("1g.6gb", 2, 1)]
    assert partitions.free_profiles(g, existing) == {
        "1g.6gb": 1, "1g.6gb+me": 1, "2g.12gb": 0, "2g.12gb+me": 0, "4g.24gb": 0
    }
    assert partitions.free_profiles(g, [])["1g.6gb"] == 4


def _simulated(model: str, mode: str, count: int = 1) -> list[hami_devices.Device]:
    adapter = NvidiaAdapter(parse_config({"device-plugin": {"mig-mode": mode, "isolation-level": "none"}}))
    infos = [
        DeviceInfo(uuid=f"GPU-sim-{i}", index=i, vendor="nvidia", model=model, memory_mib=81920) for i in range(count)
    ]
    return adapter.simulate(infos, MemoryLedger())


def test_simulated_mig_models_get_their_catalog() -> None:
    (device,) = _simulated("NVIDIA A100-SXM4-80GB", "flexible")
    assert [p.name for p in device.info.partitions][:3] == ["1g.10gb", "1g.10gb+me", "1g.20gb"]
    (t4,) = _simulated("T4", "flexible")
    assert t4.info.partitions == []
    (unused,) = _simulated("A100-80GB", "disabled")  # MIG not used: nothing offered that cannot be granted
    assert unused.info.partitions == []


def test_simulated_flexible_mode_packs_valid_layouts_only() -> None:
    (device,) = _simulated("A100-80GB", "flexible")
    four = device.allocate({"parts": [{"partition": "4g.40gb"}]})
    three = device.allocate({"parts": [{"partition": "auto", "memory_mib": 30000}]})
    assert three.grants[0].partition == "3g.40gb"
    with pytest.raises(InsufficientResources) as err:
        device.allocate({"parts": [{"partition": "auto", "memory_mib": 1000}]})
    assert "CardPartitionUnavailable" in str(err.value)
    with pytest.raises(InsufficientResources):
        device.allocate({"parts": [{"memory_mib": 1000}]})  # whole-GPU shares never mix with MIG
    device.release(four)
    assert device.allocate({"parts": [{"partition": "auto", "memory_mib": 1000}]}).grants[0].partition == "1g.10gb"


def test_simulated_disabled_mode_refuses_partitions_but_shares() -> None:
    (device,) = _simulated("H100", "disabled")
    with pytest.raises(InsufficientResources):
        device.allocate({"parts": [{"partition": "auto", "memory_mib": 1000}]})
    assert device.allocate({"parts": [{"memory_mib": 1000, "cores": 30}]}).grants[0].partition is None


def test_limiter_variables() -> None:
    adapter = NvidiaAdapter()
    base = {"node": "n", "vendor": "nvidia", "model": "H100", "index": 0, "part": 0}
    shared = Grant(uuid="GPU-a", memory_mib=4096, cores=30, **base)
    assert adapter.limiter_variables(1, shared) == {
        "CUDA_DEVICE_MEMORY_LIMIT_1": "4096m", "CUDA_DEVICE_SM_LIMIT_1": "30"
    }
    mig = Grant(uuid="GPU-a", memory_mib=9984, cores=14, partition="1g.10gb", partition_uuid="MIG-x", **base)
    assert adapter.limiter_variables(0, mig)["CUDA_DEVICE_SM_LIMIT_0"] == "0"  # hardware-isolated
    assert adapter.environment([mig], None) == {"CUDA_VISIBLE_DEVICES": "MIG-x"}
