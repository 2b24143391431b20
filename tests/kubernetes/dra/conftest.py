"""Fixtures for the DRA tests: the example DRA inventory published, with MIG in flexible mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hami_devices.config import HamiConfig
from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.kubernetes.dra.publish import publish_inventory
from hami_devices.registry import VendorRegistry, load_vendors
from tests.conftest import EXAMPLES

DRA = EXAMPLES / "dra"
INVENTORY = DRA / "inventory.yaml"


def claim(name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def exactly(name: str, device_class: str = "gpu.hami-devices.io", *, selectors: tuple[str, ...] = (),
            memory: str | None = None, cores: str | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": device_class, **extra}
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    requests = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    if requests:
        body["capacity"] = {"requests": requests}
    return {"name": name, "exactly": body}


@pytest.fixture(scope="session")
def config() -> HamiConfig:
    return HamiConfig.model_validate({"device-plugin": {"mig-mode": "flexible"}})


@pytest.fixture(scope="session")
def registry(config: HamiConfig) -> VendorRegistry:
    return load_vendors(config=config)


@pytest.fixture(scope="session")
def published(config: HamiConfig, registry: VendorRegistry) -> list[dict[str, Any]]:
    return publish_inventory(INVENTORY, config, registry=registry)


@pytest.fixture
def allocator(published: list[dict[str, Any]], config: HamiConfig, registry: VendorRegistry) -> DraAllocator:
    return DraAllocator(published, config, registry=registry)


@pytest.fixture
def dra_dir() -> Path:
    return DRA
