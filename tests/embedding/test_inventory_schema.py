"""``hami-devices inventory schema``: the inventory's JSON Schema, every field described, and every inventory
the project ships valid against it (checked by jsonschema, not by the project's own loader)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from hami_devices.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def is_inventory(path: Path) -> bool:
    docs = list(yaml.safe_load_all(path.read_text()))
    return len(docs) == 1 and isinstance(docs[0], dict) and isinstance(docs[0].get("nodes"), list)


SHIPPED = sorted(p for p in (REPO / "examples").rglob("*.yaml") if is_inventory(p))


def printed_schema(capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    assert main(["inventory", "schema"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def properties(schema: dict) -> list[tuple[str, str, dict]]:  # type: ignore[type-arg]
    found = [("inventory", k, v) for k, v in schema["properties"].items()]
    for name, sub in schema.get("$defs", {}).items():
        found += [(name, k, v) for k, v in sub.get("properties", {}).items()]
    return found


def test_every_field_is_described_and_documented(capsys: pytest.CaptureFixture[str]) -> None:
    schema = printed_schema(capsys)
    assert schema["$schema"].endswith("2020-12/schema")
    fields = properties(schema)
    assert {k for _, k, _ in fields} >= {"nodes", "name", "replicas", "cpu_milli", "devices", "vendor", "model"}
    undescribed = [(owner, k) for owner, k, v in fields if not v.get("description")]
    assert undescribed == []
    page = (REPO / "docs" / "embedding.md").read_text()
    assert [k for _, k, _ in fields if f"`{k}`" not in page] == []


def test_the_shipped_inventories_validate(capsys: pytest.CaptureFixture[str]) -> None:
    schema = printed_schema(capsys)
    assert SHIPPED
    for path in SHIPPED:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "modle": "T4"}]}]}, schema)
