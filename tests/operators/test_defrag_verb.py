"""Issue 39, item 5: ``hami-devices defrag status|plan|apply`` on a ledger, through the one placement path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hami_devices.cli.main import main
from hami_devices.ledger import open_ledger

INVENTORY = """\
nodes:
  - name: t4-a
    cpu_milli: 64000
    memory_mib: 262144
    devices:
      - {vendor: nvidia, model: T4, count: 4}
  - name: t4-b
    cpu_milli: 64000
    memory_mib: 262144
    devices:
      - {vendor: nvidia, model: T4, count: 2}
"""
SHARE = '{"preemptible": true, "parts": [{"count": 1, "memory_mib": 4000, "cores": 20}]}'


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = main(list(argv))
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


@pytest.fixture
def spread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Four preemptible shares spread one per T4 of node t4-a (every device partly used)."""
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(INVENTORY)
    source = ["--inventory", str(inventory), "--ledger", str(tmp_path / "ledger.db")]
    for _ in range(4):
        granted = _json(capsys, "allocate", *source, "--policy", "spread", "--request", SHARE, "--json")
        assert granted["grants"][0]["node"] in {"t4-a", "t4-b"}
    return source


def _holders(source: list[str]) -> dict[str, tuple[str, ...]]:
    ledger = open_ledger(source[source.index("--ledger") + 1])
    try:
        return {h.id: tuple(g.uuid for g in h.grants) for h in ledger.handles()}
    finally:
        ledger.close()


def test_status_per_node(spread: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    status = _json(capsys, "defrag", "status", *spread, "--json")
    nodes = {n["node"]: n for n in status["nodes"]}
    assert set(nodes) == {"t4-a", "t4-b"}
    held = {uuid for uuids in _holders(spread).values() for uuid in uuids}
    whole = status["cluster"]
    assert whole["devices"] == 6 and whole["partly_used"] == len(held) == 4
    assert whole["partly_used_share"] == pytest.approx(4 / 6)
    assert sum(n["partly_used"] for n in nodes.values()) == 4
    # FGD's rate is sum F_n / sum idle_n: the cluster's is the nodes' weighted by their idle share
    idle = {name: n["unallocated"] * n["devices"] for name, n in nodes.items()}
    weighted = sum(nodes[name]["fgd"] * idle[name] for name in nodes) / sum(idle.values())
    assert whole["fgd"] == pytest.approx(weighted, rel=1e-6)
    assert 0 < whole["fgd"] <= 1 and 0 < whole["operator"] <= 1


def test_plan_then_apply_moves_through_the_ledger(spread: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    before = _holders(spread)
    status = _json(capsys, "defrag", "status", *spread, "--json")["cluster"]
    plan = _json(capsys, "defrag", "plan", *spread, "--max-moves", "3", "--json")
    assert 0 < len(plan["moves"]) <= 3 and plan["budget"] == 3
    assert plan["after"]["fgd_pct"] < plan["before"]["fgd_pct"]
    assert _holders(spread) == before  # a plan moves nothing
    dry = _json(capsys, "defrag", "apply", *spread, "--max-moves", "3", "--dry-run", "--json")
    assert dry["dry_run"] is True and _holders(spread) == before
    applied = _json(capsys, "defrag", "apply", *spread, "--max-moves", "3", "--json")
    assert applied["dry_run"] is False and applied["left"] == {}
    after = _holders(spread)
    assert set(after) == set(before)  # the same allocations, under the same ids
    moved = {m["allocation_id"]: m for m in plan["moves"]}
    assert applied["moved"] == list(moved)
    for handle_id, uuids in after.items():
        assert uuids == (tuple(moved[handle_id]["to_uuids"]) if handle_id in moved else before[handle_id])
    now = _json(capsys, "defrag", "status", *spread, "--json")["cluster"]
    # the same shares, less fragmented (a device's free share is the scarcer of memory and cores: not additive)
    assert now["unallocated"] == pytest.approx(status["unallocated"], abs=0.005)
    assert now["partly_used"] < status["partly_used"]
    assert round(100 * now["fgd"], 2) == plan["after"]["fgd_pct"]
    events = _json(capsys, "events", "--ledger", spread[-1], "--kind", "task.migrated", "--json")
    assert sorted(e["allocation_id"] for e in events["events"]) == sorted(moved)


def test_apply_on_a_live_ledger_is_a_dry_run_unless_told(tmp_path: Path) -> None:
    from tests.operators.test_node_and_vendors import FAKE_NVML, _env, _verbs

    ledger = str(tmp_path / "ledger.db")
    allocate = ["allocate", "--ledger", ledger, "--policy", "spread", "--request", SHARE, "--json"]
    *granted, applied = _verbs(allocate, allocate, ["defrag", "apply", "--ledger", ledger, "--max-moves", "2",
                                                    "--json"],
                               env=_env(HAMI_NVML_LIBRARY=str(FAKE_NVML), NODE_NAME="gpu-node-07"))
    assert [g["rc"] for g in granted] == [0, 0], [g["stderr"] for g in granted]
    assert applied["rc"] == 0, applied["stderr"]
    report = json.loads(applied["stdout"])
    assert report["dry_run"] is True and len(report["moves"]) == 1  # one of the two shares would move
    homes = {json.loads(g["stdout"])["id"]: json.loads(g["stdout"])["grants"][0]["uuid"] for g in granted}
    assert len(set(homes.values())) == 2
    ledger_now = open_ledger(ledger)
    try:
        assert {h.id: h.grants[0].uuid for h in ledger_now.handles()} == homes  # nothing moved
    finally:
        ledger_now.close()
