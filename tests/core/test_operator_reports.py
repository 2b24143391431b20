"""What an operator reads: allocations and devices with their node, namespace and pod, and refusals that lead
with what decides -- what the request needs and the nearest node with what it has free."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import hami_devices as hd
from hami_devices.cli.main import main
from hami_devices.config import parse_config
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import MemoryLedger, SqliteLedger

INVENTORY = {
    "nodes": [
        {"name": "t4-0", "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}]},
        {"name": "t4-1", "devices": [{"vendor": "nvidia", "model": "T4", "count": 1}]},
        {"name": "big", "devices": [{"vendor": "nvidia", "model": "H100", "count": 8},
                                    {"vendor": "ascend", "model": "910B3", "count": 8}]},
    ]
}
NO_LIMITER = parse_config({"device-plugin": {"isolation-level": "none"}})


def _columns(text: str, header: str) -> list[dict[str, str]]:
    """The rows of the table whose header starts with the column names in ``header``, as {column: cell}."""
    lines = text.splitlines()
    first = header.split()
    top = next(i for i, line in enumerate(lines) if line.split()[: len(first)] == first)
    names = lines[top].split()
    starts = [lines[top].index(n) for n in names]
    rows = []
    for line in lines[top + 2 :]:
        if not line.strip():
            break
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def test_allocations_and_monitor_show_node_namespace_and_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(INVENTORY))
    ledger_path = tmp_path / "ledger.db"
    common = ["--inventory", str(inventory), "--ledger", str(ledger_path)]
    assert main(["allocate", *common, "--model", "T4", "--memory", "4096", "--cores", "30", "--meta", "pod=web-0",
                 "--meta", "namespace=prod", "--meta", "container=main", "--json"]) == 0
    capsys.readouterr()
    ledger = SqliteLedger(ledger_path)
    (handle,) = ledger.handles()
    ledger.close()
    node = handle.grants[0].node

    assert main(["allocations", "--ledger", str(ledger_path)]) == 0
    (row,) = _columns(capsys.readouterr().out, "ID")
    assert (row["ID"], row["NODE"], row["NAMESPACE"], row["POD"]) == (handle.id, node, "prod", "web-0")

    assert main(["monitor", *common]) == 0
    out = capsys.readouterr().out
    devices = _columns(out, "NODE  DEVICE  MODEL")
    assert {(d["NODE"], d["DEVICE"]) for d in devices} >= {(node, handle.grants[0].uuid)}
    (share,) = _columns(out, "NODE  DEVICE  ALLOCATION")
    assert (share["NODE"], share["ALLOCATION"], share["NAMESPACE"], share["POD"], share["CONTAINER"]) == (
        node, handle.id, "prod", "web-0", "main"
    )
    assert share["MEM_USED/LIMIT_MIB"].endswith("/4096") and share["CORES"] == "30"


def test_a_refusal_leads_with_what_the_request_needs_and_the_nearest_free_memory() -> None:
    ledger = MemoryLedger()
    devices = hd.discover(parse_inventory(INVENTORY), ledger=ledger, config=NO_LIMITER)
    t4 = {d.info.node: [x for x in devices if x.info.node == d.info.node] for d in devices if d.info.model == "T4"}
    total = t4["t4-1"][0].info.memory_mib
    for device, taken in [(t4["t4-0"][0], 9000), (t4["t4-0"][1], 12000), (t4["t4-1"][0], 4000)]:
        device.allocate({"parts": [{"memory_mib": taken}]})
    with pytest.raises(hd.InsufficientResources) as refused:
        hd.allocate(devices, {"name": "web", "parts": [{"models": ["T4"], "memory_mib": 12288}]})
    text = str(refused.value)
    assert text.startswith("no placement for web: no T4 with 12 GiB free; CardInsufficientMemory x")
    # the 16 devices that are no T4 (and their node) are noise: they come after what decides, not first
    assert text.index("CardInsufficientMemory") < text.index("; not what was asked: CardTypeMismatch x17;")
    best, second = total - 4000, total - 9000  # what each node's best T4 has left
    assert f"nearest: t4-1 ({best / 1024:.1f} GiB free), t4-0 ({second / 1024:.1f} GiB free)" in text
    assert text.endswith("fits when capacity frees")

    with pytest.raises(hd.InsufficientResources) as unmatched:
        hd.allocate(devices, {"parts": [{"models": ["T4"], "precision": "fp8", "memory_mib": 1024}]})
    assert str(unmatched.value).startswith("no placement for request: no device is T4; ")
