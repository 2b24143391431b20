"""Bad queue files and timed workloads give typed errors that name the key and the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hami_devices.errors import InvalidConfig, InvalidRequest
from hami_devices.queueing import load_queues, parse_queues
from hami_devices.queueing.workload import load_timed_workload, parse_timed_workload
from tests.queueing.helpers import cluster, make_loop

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "queues"

BAD: list[tuple[Any, str, str]] = [
    ({}, "queues", "required"),
    ({"queues": []}, "queues", "at least 1"),
    ({"queues": [{"name": "a", "weight": 0}]}, "queues.0.weight", "greater than 0"),
    ({"queues": [{"name": "a", "colour": 1}]}, "queues.0.colour", "Extra inputs"),
    ({"queues": [{"name": "a b"}]}, "queues.0.name", "pattern"),
    ({"queues": [{"name": "a", "guarantee": {"gpus": 1}}]}, "queues.0.guarantee.gpus", "unknown resource"),
    ({"queues": [{"name": "a", "guarantee": {"device-cores": -1}}]}, "queues.0.guarantee.device-cores", ">= 0"),
    ({"queues": [{"name": "a", "guarantee": {"device-cores": True}}]}, "queues.0.guarantee.device-cores", "integer"),
    ({"queues": [{"name": "a", "guarantee": {"device-cores": "8"}}]}, "queues.0.guarantee.device-cores", "integer"),
    (
        {"queues": [{"name": "a", "limit": {"host-cpu-milli@nvidia": 1}}]},
        "queues.0.limit.host-cpu-milli@nvidia",
        "scope",
    ),
    (
        {"queues": [{"name": "a", "guarantee": {"device-cores": 300}, "limit": {"device-cores": 200}}]},
        "queues.0.guarantee.device-cores",
        "above the limit",
    ),
    (
        {"queues": [{"name": "a", "guarantee": {"device-cores": 100}, "lending-limit": {"device-cores": 200}}]},
        "queues.0.lending-limit.device-cores",
        "above the guarantee",
    ),
    (
        {
            "queues": [
                {
                    "name": "p",
                    "guarantee": {"device-cores": 100},
                    "children": [
                        {"name": "a", "guarantee": {"device-cores": 80}},
                        {"name": "b", "guarantee": {"device-cores": 80}},
                    ],
                }
            ]
        },
        "queues.0.guarantee.device-cores",
        "add up to 160",
    ),
    (
        {"queues": [{"name": "a"}, {"name": "p", "children": [{"name": "a"}]}]},
        "queues.1.children.0.name",
        "already defined",
    ),
    ({"queues": [{"name": "a", "min-runtime": -5}]}, "queues.0.min-runtime", "greater than or equal"),
    ({"queues": [{"name": "a", "preemption": {"reclaim": "maybe"}}]}, "queues.0.preemption.reclaim", "boolean"),
    ({"classes": {"big": {}}, "queues": [{"name": "a"}]}, "classes.big", "at least one"),
]


@pytest.mark.parametrize(("data", "field", "message"), BAD, ids=[b[1] for b in BAD])
def test_bad_queue_data_names_the_field(data: Any, field: str, message: str) -> None:
    with pytest.raises(InvalidConfig) as err:
        parse_queues(data, source="q.yaml")
    assert err.value.field == field
    assert message in err.value.message
    assert err.value.source == "q.yaml"
    assert str(err.value).startswith("q.yaml: ")


def test_bad_files_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("queues: [\n")
    with pytest.raises(InvalidConfig) as err:
        load_queues(broken)
    assert err.value.field == "<yaml>" and err.value.source == str(broken)
    with pytest.raises(InvalidConfig) as err:
        load_queues(tmp_path / "missing.yaml")
    assert err.value.field == "<file>"
    listed = tmp_path / "list.yaml"
    listed.write_text("- name: a\n")
    with pytest.raises(InvalidConfig, match="mapping"):
        load_queues(listed)


def test_a_scope_no_device_answers_to_is_an_error_naming_the_key() -> None:
    queues = {"queues": [{"name": "a", "limit": {"device-cores@nvdia": 100}}]}
    with pytest.raises(InvalidConfig) as err:
        make_loop(cluster(("n0", "A100", 1)), queues)
    assert err.value.field == "device-cores@nvdia"
    assert "matches no device" in err.value.message


def test_bundled_example_is_valid() -> None:
    spec = load_queues(EXAMPLES / "queues.yaml")
    assert [q.name for q in spec.queues] == ["online", "research"]
    assert load_timed_workload(EXAMPLES / "workload.yaml")


TIMED_BAD: list[tuple[Any, str, str]] = [
    ({"tasks": [{"parts": [{"count": 1}], "arrival": -1}]}, "tasks.0.arrival", ">= 0"),
    ({"tasks": [{"parts": [{"count": 1}], "duration": "long"}]}, "tasks.0.duration", ">= 0"),
    ({"tasks": [{"parts": [{"count": 1}], "replicas": 0}]}, "tasks.0.replicas", "positive"),
    ({"tasks": [{"parts": [{"count": 0}]}]}, "tasks.0.parts.0.count", "greater than or equal to 1"),
    (
        {"tasks": [{"name": "x", "parts": [{"count": 1}]}, {"name": "x", "parts": [{"count": 1}]}]},
        "tasks.1.name",
        "twice",
    ),
    ({"jobs": []}, "tasks", "mapping"),
]


@pytest.mark.parametrize(("data", "field", "message"), TIMED_BAD, ids=[b[1] for b in TIMED_BAD])
def test_bad_timed_workload_names_the_field(data: Any, field: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_timed_workload(data, source="w.yaml")
    assert err.value.field == field
    assert message in err.value.message
    assert err.value.source == "w.yaml"


def test_timed_workload_replicas_arrive_every_interval_in_order() -> None:
    tasks = parse_timed_workload(
        {
            "tasks": [
                {"name": "late", "arrival": 100, "parts": [{"count": 1}]},
                {"name": "r", "arrival": 10, "every": 30, "replicas": 3, "duration": 5, "parts": [{"count": 1}]},
            ]
        }
    )
    assert [(t.name, t.arrival, t.duration) for t in tasks] == [
        ("r-0", 10, 5),
        ("r-1", 40, 5),
        ("r-2", 70, 5),
        ("late", 100, None),
    ]


def test_schedule_workloads_replay_as_they_are() -> None:
    tasks = load_timed_workload(EXAMPLES.parent / "workload.yaml")
    assert tasks and all(t.arrival == 0 and t.duration is None for t in tasks)
