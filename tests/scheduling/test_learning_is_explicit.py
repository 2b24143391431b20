"""Ranking and placing change nothing; ``Engine.observe`` is the one step that teaches the workload mix, and
``Engine.assume`` (formerly ``book``) the one that holds a placement in the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import hami_devices as hd
from hami_devices.config import parse_config
from hami_devices.scheduler import Engine

LEARNING = parse_config({"scheduler": {"policy": "fragmentation-aware"}, "device-plugin": {"isolation-level": "none"}})
SHARE = hd.ResourceRequest.single(models=["T4"], memory_mib=4_096, cores=25)
TOO_BIG = hd.ResourceRequest.single(models=["T4"], memory_mib=10**6)


def learned(engine: Engine) -> dict[str, Any]:
    mix = engine.learned_mix()
    assert mix is not None  # the fragmentation-aware policy learns its mix
    return mix.to_dict()


@pytest.fixture
def engine(example_inventory: Path) -> Engine:
    return hd.build_engine(example_inventory, LEARNING)


def test_ranking_and_placing_leave_the_learned_mix_as_it_was(engine: Engine) -> None:
    before = learned(engine)
    engine.rank(SHARE, 3)
    engine.place(SHARE)
    engine.try_place(SHARE)
    assert engine.try_place(TOO_BIG) is None
    with pytest.raises(hd.InsufficientResources):
        engine.place(TOO_BIG)
    engine.judge_nodes(SHARE)
    assert learned(engine) == before
    assert engine.cluster.bookings == {}


def test_observe_teaches_the_mix_one_request_at_a_time(engine: Engine) -> None:
    seen = learned(engine)["seen"]
    engine.observe(SHARE)
    engine.observe({"parts": [{"models": ["T4"], "memory_mib": 2048, "cores": 10}]})  # a mapping, as place takes
    assert learned(engine)["seen"] == seen + 2


def test_schedule_observes_once_places_and_assumes(engine: Engine) -> None:
    seen = learned(engine)["seen"]
    placement = engine.schedule(SHARE)
    assert learned(engine)["seen"] == seen + 1
    assert placement.booking_id in engine.cluster.bookings
    with pytest.raises(hd.InsufficientResources):
        engine.schedule(TOO_BIG)
    assert learned(engine)["seen"] == seen + 2  # a refused request was asked for all the same


def test_assume_holds_the_placement_and_book_is_its_deprecated_name(engine: Engine) -> None:
    first = engine.assume(engine.place(SHARE))
    assert engine.cluster.bookings[first.id].grants == first.grants
    with pytest.warns(DeprecationWarning, match=r"Engine\.assume"):
        second = engine.book(engine.place(SHARE))
    assert set(engine.cluster.bookings) == {first.id, second.id}


def test_the_commit_path_observes_each_request_it_decides(example_inventory: Path) -> None:
    """``engine.allocate`` (``hd.allocate``'s transaction) learns from every request it is given, placed or not;
    a placement decided earlier and committed teaches the ledger's mix once, not the engine again."""
    engine = hd.build_engine(example_inventory, LEARNING, ledger=hd.MemoryLedger())
    seen = learned(engine)["seen"]
    engine.allocate(SHARE)
    with pytest.raises(hd.InsufficientResources):
        engine.allocate(TOO_BIG)
    assert learned(engine)["seen"] == seen + 2
    engine.commit(engine.place(SHARE))
    assert learned(engine)["seen"] == seen + 2
