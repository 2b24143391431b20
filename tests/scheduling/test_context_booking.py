"""A context's memory is booked on top of every shared grant, in the engine's books and in the ledger's re-check.

On a real H200 (driver 580.159.04, CUDA 13.0, PyTorch 2.11) a process holding a 3,000 MiB tensor showed 3,518 MiB
in NVML: 518 MiB of CUDA context per process, outside every share.  Ten 1 GiB shares therefore take
10 x (1024 + 518) MiB of the card, not 10 GiB, and a share that fits only if its context were free is refused.
"""

from __future__ import annotations

from typing import Any

import pytest

import hami_devices as hd
from hami_devices import build_engine
from hami_devices.config import parse_config
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import MemoryLedger
from hami_devices.models import ResourceRequest

CONTEXT_MIB = 518  # 3,518 - 3,000 MiB, measured as above
H200_MIB = 143_771  # the H200's memory as NVML reports it (the catalog's spec-sheet figure)
SHARE_MIB = 1024


def _inventory() -> Any:
    return parse_inventory(
        {"nodes": [{"name": "h", "devices": [{"vendor": "nvidia", "model": "H200", "count": 1, "split_count": 20}]}]}
    )


# MIG disabled: the engine judges plain shares over its arrays; enabled (the default for a MIG-capable model that
# holds no instance): every part goes through the NVIDIA adapter's own rounding.  Both book the same context.
CONFIGS = {
    "plain": {"device-plugin": {"mig-mode": "disabled"}},
    "rounded": {},
}


@pytest.fixture(params=sorted(CONFIGS))
def config(request: pytest.FixtureRequest) -> Any:
    return parse_config(CONFIGS[request.param])


def test_ten_shares_book_ten_contexts(config: Any) -> None:
    ledger = MemoryLedger()
    devices = hd.discover(_inventory(), ledger=ledger, config=config)
    handles = [hd.allocate(devices, {"parts": [{"memory_mib": SHARE_MIB, "cores": 5}]}) for _ in range(10)]
    assert [h.grants[0].context_mib for h in handles] == [CONTEXT_MIB] * 10
    assert [h.grants[0].memory_mib for h in handles] == [SHARE_MIB] * 10  # the limiter's share is unchanged
    engine = build_engine(_inventory(), config, ledger=ledger)
    row = engine.cluster.row(devices[0].uuid)
    assert int(engine.cluster.mem_used[row]) == 10 * (SHARE_MIB + CONTEXT_MIB)
    (metrics,) = [d.monitor() for d in devices]
    assert [a.context_booked_mib for a in metrics.allocations] == [CONTEXT_MIB] * 10


def test_a_share_that_fits_only_without_its_context_is_refused(config: Any) -> None:
    ledger = MemoryLedger()
    devices = hd.discover(_inventory(), ledger=ledger, config=config)
    first = 100_000
    hd.allocate(devices, {"parts": [{"memory_mib": first, "cores": 10}]})
    room = H200_MIB - (first + CONTEXT_MIB) - CONTEXT_MIB  # what a second share may take beside its own context
    too_big = {"parts": [{"memory_mib": room + 1, "cores": 10}]}
    assert room + 1 + first <= H200_MIB  # without the contexts it would fit
    engine = build_engine(_inventory(), config, ledger=ledger)
    with pytest.raises(hd.InsufficientResources) as refused:
        engine.place(ResourceRequest.model_validate(too_big))
    assert hd.ReasonCode.CARD_INSUFFICIENT_MEMORY in refused.value.codes
    assert f"with {CONTEXT_MIB} MiB of context" in str(refused.value)
    with pytest.raises(hd.InsufficientResources) as also:
        hd.allocate(devices, too_big)
    assert hd.ReasonCode.CARD_INSUFFICIENT_MEMORY in also.value.codes
    fits = hd.allocate(devices, {"parts": [{"memory_mib": room, "cores": 10}]})
    assert fits.grants[0].context_mib == CONTEXT_MIB


def test_an_exclusive_grant_holds_its_context_inside(config: Any) -> None:
    """The whole card is the tenant's: its context is in it, and nothing else shares the card."""
    devices = hd.discover(_inventory(), ledger=MemoryLedger(), config=config)
    whole = hd.allocate(devices, {"parts": [{"cores": 100}]})
    (grant,) = whole.grants
    assert grant.exclusive and grant.context_mib == 0 and grant.memory_mib == H200_MIB


def test_a_model_without_a_measured_context_books_none() -> None:
    inventory = parse_inventory({"nodes": [{"name": "t", "devices": [{"vendor": "nvidia", "model": "T4"}]}]})
    devices = hd.discover(inventory, ledger=MemoryLedger())
    handle = hd.allocate(devices, {"parts": [{"memory_mib": SHARE_MIB}]})
    assert handle.grants[0].context_mib == 0
