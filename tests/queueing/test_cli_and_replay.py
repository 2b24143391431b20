"""``hami-devices queues`` on the bundled example, the replay's figures, and the bench at a tiny scale."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hami_devices.cli.main import main
from hami_devices.queueing import EventKind
from hami_devices.queueing.loop import AdmissionLoop
from hami_devices.queueing.replay import replay
from hami_devices.queueing.workload import parse_timed_workload
from tests.queueing.helpers import cluster, make_loop

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "queues"
ARGS = [
    "queues",
    "simulate",
    "--inventory",
    str(EXAMPLE / "inventory.yaml"),
    "--queues",
    str(EXAMPLE / "queues.yaml"),
    "--workload",
    str(EXAMPLE / "workload.yaml"),
    "--config",
    str(EXAMPLE / "config.yaml"),
]


def test_bundled_example_shows_borrowing_and_a_reclaim_with_its_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["preemptive"] is True
    assert out["borrowing_admissions"] > 0
    reclaims = [e for e in out["eviction_log"] if e["reason"] == "reclaim"]
    assert reclaims and all(e["by_queue"] == "online" and "below its guarantee" in e["detail"] for e in reclaims)
    assert any(e["reason"] == "priority" for e in out["eviction_log"])
    assert out["queues"]["online"]["guarantee_violations"] == 0
    assert out["queues"]["vision"]["borrowed_share_max"] > 0
    assert len(out["series"]["times"]) == len(out["series"]["usage"]["online"])


def test_table_output_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plot = tmp_path / "usage.png"
    assert main([*ARGS, "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    assert "BORROWED mean/max" in text and "evictions:" in text and "[reclaim] for online/" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evictions_off_without_enable_preemptive(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for a in ARGS if a not in ("--config", str(EXAMPLE / "config.yaml"))]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["preemptive"] is False and out["evictions"] == 0


def test_check_and_bad_queue_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert (
        main(
            [
                "queues",
                "check",
                "--queues",
                str(EXAMPLE / "queues.yaml"),
                "--inventory",
                str(EXAMPLE / "inventory.yaml"),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "  vision" in text and "valid" in text and "device-cores 1200" in text
    bad = tmp_path / "q.yaml"
    bad.write_text("queues:\n  - name: a\n    guarantee: {gpus: 2}\n")
    assert main(["queues", "check", "--queues", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: queues.0.guarantee.gpus: unknown resource" in err  # the file, its line, the field


def test_replay_finishes_tasks_after_their_duration_and_measures_waits() -> None:
    loop, log = make_loop(cluster(("n0", "A100", 1)), {"queues": [{"name": "q"}]})
    tasks = parse_timed_workload(
        {
            "tasks": [
                {"name": "first", "queue": "q", "duration": 100, "parts": [{"count": 1, "cores": 100}]},
                {"name": "second", "queue": "q", "arrival": 5, "duration": 50, "parts": [{"count": 1, "cores": 100}]},
            ]
        }
    )
    report = replay(loop, tasks, tick=10, horizon=300)
    q = report.groups["q"].to_dict(report.horizon)
    assert q["admitted"] == 2 and q["waiting_at_end"] == 0
    # second arrives at 5, first finishes at 100, the tick at 100 admits second: waited 95 s
    assert sorted(report.groups["q"].waits) == [0.0, 95.0]
    assert [e.task for e in log if e.kind == EventKind.FINISHED] == ["first", "second"]
    # one device busy from 0 to 150 of 300 seconds
    assert report.utilisation == pytest.approx(0.5)


def test_replay_counts_a_violation_when_a_task_within_its_guarantee_waits() -> None:
    # Evictions off: research holds the device, online's guaranteed task waits.
    queues = {"queues": [{"name": "online", "guarantee": {"device-cores": 100}}, {"name": "research"}]}
    for preemptive, expected in ((False, 1), (True, 0)):
        loop, _ = make_loop(cluster(("n0", "A100", 1)), queues, preemptive=preemptive)
        tasks = parse_timed_workload(
            {
                "tasks": [
                    {"name": "r", "queue": "research", "preemptible": True, "parts": [{"count": 1, "cores": 100}]},
                    {"name": "o", "queue": "online", "arrival": 20, "parts": [{"count": 1, "cores": 100}]},
                ]
            }
        )
        report = replay(loop, tasks, tick=10, horizon=60)
        assert report.groups["online"].violations == expected


def test_from_config_builds_the_engine_as_schedule_does() -> None:
    loop = AdmissionLoop.from_config(EXAMPLE / "inventory.yaml", EXAMPLE / "queues.yaml", EXAMPLE / "config.yaml")
    assert loop.preemptive is True and loop.engine.policy.name == "binpack"
    assert len(loop.cluster.nodes) == 3


def test_bench_runs_at_a_tiny_scale() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "queues.py"), "--scale", "0.02", "--hours", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    out = json.loads(result.stdout)
    assert set(out["results"]) == {"static", "fifo", "ours"}
    assert out["results"]["ours"]["guarantee_violations"] == 0
    assert out["cluster"]["nodes"] < 100 and out["workload"]["tasks"] > 0
    assert "deployment input" in out["online_guarantee"]["source"]
