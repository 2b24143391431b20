"""A ResourceClaim's ``hami-devices.io/core-policy``: prepared on the node, its shares' compute policy reaches the
CDI environment and the limiter region the container will use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import hami_devices as hd
from hami_devices.config import HamiConfig
from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.kubernetes.dra.claims import parse_claim
from hami_devices.kubernetes.dra.node import NodePlugin
from hami_devices.limiter import Region
from hami_devices.plugin import Grant
from hami_devices.registry import VendorRegistry

from .conftest import DRA, INVENTORY


def mixed_tiers(policy: str | None) -> dict[str, Any]:
    claim: dict[str, Any] = yaml.safe_load((DRA / "mixed-tier-claim.yaml").read_text())
    if policy is not None:
        claim["metadata"]["annotations"] = {"hami-devices.io/core-policy": policy}
    return claim


def prepare(claim: dict[str, Any], allocator: DraAllocator, tmp_path: Path, config: HamiConfig,
            registry: VendorRegistry) -> tuple[list[Grant], dict[str, str]]:
    ledger = hd.SqliteLedger(tmp_path / "ledger.db")
    try:
        devices = hd.discover(INVENTORY, config=config, ledger=ledger, registry=registry)
        prepared = NodePlugin("tiers-a", devices, ledger, tmp_path / "cdi").prepare(allocator.allocated(claim))
        [device] = json.loads(prepared.spec_path.read_text())["devices"]
        return prepared.handle.grants, dict(e.split("=", 1) for e in device["containerEdits"]["env"])
    finally:
        ledger.close()


@pytest.mark.parametrize(("annotation", "mode"), [("share", "share"), ("default", "share"), ("force", "cap")])
def test_the_claims_policy_reaches_the_cdi_environment_and_the_region(
    annotation: str, mode: str, allocator: DraAllocator, tmp_path: Path, config: HamiConfig, registry: VendorRegistry
) -> None:
    grants, env = prepare(mixed_tiers(annotation), allocator, tmp_path, config, registry)
    assert [(g.cores, g.core_policy) for g in grants] == [(30, mode), (50, mode), (60, mode)]
    assert {k: v for k, v in env.items() if k.startswith("HAMI_DEVICE_CORE_POLICY")} == {
        f"HAMI_DEVICE_CORE_POLICY_{i}": mode for i in range(3)}
    with Region.open(env["HAMI_REGION_PATH"]) as region:
        assert [(u.core_limit_pct, u.core_policy) for u in region.device_usage()[:3]] == [
            (30, mode), (50, mode), (60, mode)]


def test_a_claim_that_says_nothing_keeps_the_default_and_disable_paces_nothing(
    allocator: DraAllocator, tmp_path: Path, config: HamiConfig, registry: VendorRegistry
) -> None:
    grants, env = prepare(mixed_tiers(None), allocator, tmp_path / "plain", config, registry)
    assert [g.core_policy for g in grants] == ["cap"] * 3 and env["HAMI_DEVICE_CORE_POLICY_0"] == "cap"
    allocator.release("4b1c6c3e-0d6f-4a59-9d51-2f7a1d1e0001")
    grants, env = prepare(mixed_tiers("disable"), allocator, tmp_path / "off", config, registry)
    assert [(g.cores, g.core_policy) for g in grants] == [(30, "unlimited"), (50, "unlimited"), (60, "unlimited")]
    assert [env[f"HAMI_DEVICE_CORE_LIMIT_{i}"] for i in range(3)] == ["0"] * 3
    assert not any(k.startswith("HAMI_DEVICE_CORE_POLICY") for k in env)


def test_a_bad_annotation_names_the_claim_and_the_key() -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_claim(mixed_tiers("sometimes"))
    assert err.value.field == "metadata.annotations.hami-devices.io/core-policy"
    assert "default/mixed-tiers" in err.value.message
