"""``hami-devices schedule`` on the shipped examples."""

from __future__ import annotations

import json

import pytest

from hami_devices.cli.main import main
from tests.conftest import EXAMPLES


def test_schedule_json_and_explain(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["schedule", "--inventory", str(EXAMPLES / "cluster.yaml"), "--workload", str(EXAMPLES / "workload.yaml")]
    main([*args, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["tasks"] == len(out["results"]) and out["placed"] >= 1
    for r in out["results"]:
        if r["placed"]:
            assert r["grants"] and set(r["breakdown"]) == set(r["weights"])
        else:
            assert r["reasons"]
    main([*args, "--explain", "--policy", "fragmentation-aware"])
    text = capsys.readouterr().out
    assert "fragmentation" in text and "SCORER" in text
