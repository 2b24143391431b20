"""Every entry point takes the same inputs: a request as ``ResourceRequest`` or mapping, a configuration as
path, mapping or object; a wrong type is a typed error naming the argument."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import hami_devices as hd
from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.kubernetes.dra.publish import publish_inventory
from hami_devices.queueing.loop import AdmissionLoop
from hami_devices.queueing.spec import parse_queues
from hami_devices.scheduler import Engine

REQUEST = {"name": "r", "parts": [{"memory_mib": 2048, "cores": 20, "models": ["T4"]}]}
CONFIG = {"scheduler": {"policy": "spread"}, "device-plugin": {"split-count": 4}}
CONFIG_YAML = "scheduler:\n  policy: spread\ndevice-plugin:\n  split-count: 4\n"


@pytest.fixture(scope="module")
def engine(small_inventory: Path) -> Engine:
    return hd.build_engine(small_inventory)


def config_forms(tmp: Path) -> list[Any]:
    path = tmp / "config.yaml"
    path.write_text(CONFIG_YAML)
    return [CONFIG, path, str(path), hd.load_config(path)]


def test_every_config_form_gives_the_same_configuration(small_inventory: Path, tmp_path: Path) -> None:
    for config in config_forms(tmp_path):
        engine = hd.build_engine(small_inventory, config)
        assert engine.policy.name == "spread", config
        devices = hd.discover(small_inventory, config=config)
        assert {d.info.split_count for d in devices} == {4}, config


def test_load_vendors_and_the_dra_allocator_take_every_config_form(small_inventory: Path, tmp_path: Path) -> None:
    published = publish_inventory(small_inventory)
    for config in config_forms(tmp_path):
        registry = hd.load_vendors(["nvidia"], config=config)
        assert registry.adapters["nvidia"].config.device_plugin.split_count == 4, config
        allocator = DraAllocator(published, config, registry=registry)
        assert allocator.engine.policy.name == "spread", config


def test_admission_loop_takes_a_config_mapping(small_inventory: Path) -> None:
    loop = AdmissionLoop.from_config(small_inventory, parse_queues({"queues": [{"name": "q"}]}), CONFIG)
    assert loop.engine.policy.name == "spread"


def test_every_request_form_gives_the_same_decision(engine: Engine) -> None:
    model = hd.ResourceRequest.model_validate(REQUEST)
    for method in ("place", "try_place", "schedule"):
        as_mapping = getattr(engine, method)(REQUEST)
        as_model = getattr(engine, method)(model)
        assert as_mapping is not None and as_model is not None
        assert as_mapping.node == as_model.node and as_mapping.request == as_model.request, method
        if as_mapping.booking_id:
            engine.cluster.forget(as_mapping.booking_id)
            engine.cluster.forget(as_model.booking_id)  # type: ignore[arg-type]
    assert [p.grants for p in engine.rank(REQUEST)] == [p.grants for p in engine.rank(model)]
    assert engine.judge_nodes(REQUEST).feasible == engine.judge_nodes(model).feasible
    assert engine.rejections({"parts": [{"models": ["H100"]}]}) == engine.rejections(
        hd.ResourceRequest.model_validate({"parts": [{"models": ["H100"]}]})
    )


def test_hd_allocate_takes_both_forms(small_inventory: Path) -> None:
    devices = hd.discover(small_inventory)
    first = hd.allocate(devices, REQUEST)
    second = hd.allocate(devices, hd.ResourceRequest.model_validate(REQUEST))
    assert first.request == second.request
    hd.release(first)
    hd.release(second)


WRONG: list[tuple[str, Callable[[Path, Engine], Any], type[hd.HamiError], str]] = [
    ("discover config", lambda inv, e: hd.discover(inv, config=3), hd.InvalidConfig, "config"),
    ("discover inventory", lambda inv, e: hd.discover(42), hd.InvalidRequest, "inventory"),
    ("build_engine config", lambda inv, e: hd.build_engine(inv, ["spread"]), hd.InvalidConfig, "config"),
    ("load_vendors config", lambda inv, e: hd.load_vendors(config=3), hd.InvalidConfig, "config"),  # type: ignore[arg-type]
    ("DraAllocator config", lambda inv, e: DraAllocator([], config=3), hd.InvalidConfig, "config"),  # type: ignore[arg-type]
    ("build_engine inventory", lambda inv, e: hd.build_engine({"nodes": []}), hd.InvalidRequest, "inventory"),
    ("engine.place", lambda inv, e: e.place(42), hd.InvalidRequest, "<request>"),
    ("engine.rank", lambda inv, e: e.rank("parts: []"), hd.InvalidRequest, "<request>"),
    ("engine.judge_nodes", lambda inv, e: e.judge_nodes([REQUEST]), hd.InvalidRequest, "<request>"),
    ("engine.commit", lambda inv, e: e.commit(REQUEST), hd.InvalidRequest, "placement"),  # type: ignore[arg-type]
    ("engine.release", lambda inv, e: e.release(7), hd.InvalidRequest, "handle"),  # type: ignore[arg-type]
    ("hd.allocate", lambda inv, e: hd.allocate(hd.discover(inv), 42), hd.InvalidRequest, "<request>"),  # type: ignore[arg-type]
    ("loop.submit", lambda inv, e: AdmissionLoop(e, parse_queues({"queues": [{"name": "q"}]})).submit(42),  # type: ignore[arg-type]
     hd.InvalidRequest, "<request>"),
    ("a field of a mapping", lambda inv, e: e.place({"parts": [{"cores": 101}]}), hd.InvalidRequest, "parts.0.cores"),
]


@pytest.mark.parametrize(("entry", "call", "error", "field"), WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_type_names_the_argument(
    small_inventory: Path,
    engine: Engine,
    entry: str,
    call: Callable[[Path, Engine], Any],
    error: type[hd.HamiError],
    field: str,
) -> None:
    with pytest.raises(error) as raised:
        call(small_inventory, engine)
    assert isinstance(raised.value, hd.InvalidRequest) and raised.value.field == field, entry
