"""``hami-devices dra``: publish then allocate the mixed-tier example, as a user would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hami_devices.cli.main import main
from hami_devices.kubernetes.dra.validate import validate

from .conftest import DRA, INVENTORY


def test_publish_then_allocate_the_mixed_tier_claim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dra", "publish", "--inventory", str(INVENTORY)]) == 0
    published = list(yaml.safe_load_all(capsys.readouterr().out))
    for obj in published:
        validate(obj)
    slices = tmp_path / "slices.yaml"
    slices.write_text(yaml.safe_dump_all(published))
    assert main(["dra", "allocate", "--slices", str(slices), "--claim", str(DRA / "mixed-tier-claim.yaml")]) == 0
    allocated = yaml.safe_load(capsys.readouterr().out)
    validate(allocated)
    results = allocated["status"]["allocation"]["devices"]["results"]
    assert [r["request"] for r in results] == ["t4", "a30", "h100"]
    held = tmp_path / "held.yaml"
    held.write_text(yaml.safe_dump(allocated))
    # with that claim booked, a whole H100 can only be the other one
    h100 = 'device.attributes["hami-devices.io"].model == "H100"'
    request = {"deviceClassName": "gpu.hami-devices.io", "selectors": [{"cel": {"expression": h100}}]}
    whole = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "whole", "uid": "w"},
             "spec": {"devices": {"requests": [{"name": "g", "exactly": request}]}}}
    second = tmp_path / "whole.yaml"
    second.write_text(yaml.safe_dump(whole))
    assert main(["dra", "allocate", "--slices", str(slices), "--claim", str(second), "--allocated", str(held),
                 "--json"]) == 0
    [again] = json.loads(capsys.readouterr().out)["status"]["allocation"]["devices"]["results"]
    booked_h100 = next(r["device"] for r in results if r["request"] == "h100")
    assert again["device"] != booked_h100 and again["consumedCapacity"]["cores"] == "100"


def test_node_prepare_and_unprepare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dra", "publish", "--inventory", str(INVENTORY), "--node", "edge-mlu", "--json"]) == 0
    slices = tmp_path / "slices.json"
    slices.write_text(capsys.readouterr().out)
    assert main(["dra", "allocate", "--slices", str(slices), "--claim", str(DRA / "mlu-t4-claim.yaml")]) == 0
    claim = tmp_path / "claim.yaml"
    claim.write_text(capsys.readouterr().out)
    common = ["--inventory", str(INVENTORY), "--node", "edge-mlu", "--claim", str(claim),
              "--ledger", str(tmp_path / "l.db"), "--cdi-dir", str(tmp_path / "cdi"), "--json"]
    assert main(["dra", "prepare", *common]) == 0
    prepared = json.loads(capsys.readouterr().out)
    assert Path(prepared["cdiSpec"]).exists() and len(prepared["devices"]) == 2
    assert main(["dra", "unprepare", *common]) == 0
    assert json.loads(capsys.readouterr().out)["released"] is True


def test_errors_are_reported_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: x}\nspec: {devices: {}}\n")
    assert main(["dra", "allocate", "--slices", str(bad), "--claim", str(bad)]) == 2
    assert "spec.devices.requests" in capsys.readouterr().err


def _claim(tmp_path: Path, name: str, request: dict[str, object]) -> Path:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "uid": name},
             "spec": {"devices": {"requests": [{"name": "g", "exactly": request}]}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(claim))
    return path


def test_a_selector_that_matches_nothing_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dra", "publish", "--inventory", str(INVENTORY)]) == 0
    slices = tmp_path / "slices.yaml"
    slices.write_text(capsys.readouterr().out)
    b200 = 'device.attributes["hami-devices.io"].model == "B200"'
    nothing = _claim(tmp_path, "b200", {"deviceClassName": "gpu.hami-devices.io", "selectors": [{"cel": {
        "expression": b200}}]})
    assert main(["dra", "allocate", "--slices", str(slices), "--claim", str(nothing)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"request g: the request CEL selector {b200!r} matches no published device" in line
    assert "Mismatch" not in line  # no device-by-device noise for a selector that selects nothing
    t4 = 'device.attributes["hami-devices.io"].model == "T4"'
    huge = _claim(tmp_path, "huge", {"deviceClassName": "gpu.hami-devices.io", "selectors": [{"cel": {
        "expression": t4}}], "capacity": {"requests": {"memory": "1Ti"}}})
    assert main(["dra", "allocate", "--slices", str(slices), "--claim", str(huge)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    # the selected T4s decide; the devices the selector left out come last, as such
    assert "no placement for default/huge: no whole selected device (of 3) with 1024 GiB free; " in line
    assert line.index("CardInsufficientMemory") < line.index("not what was asked: CardUuidMismatch")
