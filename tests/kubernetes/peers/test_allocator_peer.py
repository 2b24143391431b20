"""Our DRA allocator against kube-scheduler's (``k8s.io/dynamic-resource-allocation/structured``) on the same
slices, classes and claims: the examples, then a seeded corpus of claims allocated in order.

On every claim, on the state our earlier allocations left:
- feasibility: we allocate it exactly when the official allocator can (on some node);
- our allocation meets the official constraints: restricted to the devices we chose, the official
  allocator allocates the claim on our node, with those very devices and the same consumed capacity.

Kubernetes 1.34's allocator for shared devices has known defects, fixed in later releases: its
capacity check reads the capacity of the wrong device (kubernetes#133705: the k-th device of a request
is checked against the k-th device of its slice; we publish one card a slice under 1.34 rules, so a
request for one device is checked against the right card, but one of ``count`` 2 or more runs past the
slice's end and the allocator panics, which would end kube-scheduler), and it cannot share a device
that consumes counters (kubernetes#134100).  So under the pinned release, where 1.34 disagrees with
us, the newest release's allocator is asked on the same input (1.34's slices, with their counter sets moved
to slices of their own as newer releases require, our claims and allocations): it must agree with us
on every claim but those where it grants a share of a card beside a partition of it, or the other
way round.  That is the one thing 1.34's slices cannot express (a shared card would have to consume
its counter set, which 1.34 cannot share): there Kubernetes 1.34 over-commits the card where we
refuse (docs/dra.md).  1.34 may panic only on claims with a request of two or more devices.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.kubernetes.peers import dra_world
from tests.kubernetes.peers.conftest import Peer

CORPUS_SEEDS = (11, 12, 13)
CORPUS_SIZE = 40


def _ours(c: dict[str, Any]) -> dict[str, Any] | None:
    allocation: dict[str, Any] | None = (c.get("status") or {}).get("allocation")
    return allocation


def _devices(allocation: dict[str, Any]) -> Counter[tuple[str, str, str]]:
    return Counter((r["driver"], r["pool"], r["device"]) for r in allocation["devices"]["results"])


def _consumed(allocation: dict[str, Any]) -> Counter[tuple[Any, ...]]:
    from hami_devices.kubernetes.quantity import parse

    return Counter(
        (r["pool"], r["device"], tuple(sorted((k, parse(v)) for k, v in (r.get("consumedCapacity") or {}).items())))
        for r in allocation["devices"]["results"]
    )


def compare(peer: Peer, claims: list[dict[str, Any]], *, as_newer: bool = False,
            inventory: Path = dra_world.INVENTORY, policy: str | None = None) -> tuple[list[str], int]:
    """Disagreements (one line each) between us and the official allocator, and how many claims we allocated.

    ``as_newer``: our allocations on the pinned release's slices, judged by ``peer`` on those slices written
    as newer releases accept them (``dra_world.counters_apart``).  ``policy``: our allocator's (binpack,
    spread ...; default: the configuration's)."""
    objects = dra_world.published(dra_world.RELEASE_RULES["pinned" if as_newer else peer.release], inventory)
    ours = dra_world.allocate_in_order(objects, claims, policy)
    shown = dra_world.counters_apart(objects) if as_newer else objects
    answer = peer.run("allocate", {"objects": shown, "nodes": dra_world.nodes(objects), "claims": ours})
    if peer.release == "pinned":
        crashed = [c["metadata"]["name"] for c, step in zip(ours, answer["steps"], strict=True)
                   if _panicked(step) and not _counts_several_shares(c)]
        assert not crashed, f"1.34's allocator panics on claims without a count >= 2 request: {crashed}"
    problems = []
    cards = dra_world.card_of(objects)
    held: list[dict[str, Any]] = []  # our allocations so far
    for c, step in zip(ours, answer["steps"], strict=True):
        name, mine = c["metadata"]["name"], _ours(c)
        if mine is not None:
            held.append(mine)
        if as_newer and mine is None and step["allocation"] and dra_world.share_beside_partition(
                cards, held, step["allocation"]):
            continue  # 1.34's slices cannot say that a card is either shared or partitioned: see the docstring
        if step["error"]:  # e.g. a CEL runtime error on some device: Kubernetes refuses the claim, and so must we
            if mine is not None:
                problems.append(f"{name}: we allocated it, the official allocator fails: {step['error']}")
            continue
        if (mine is not None) != bool(step["feasibleNodes"]):
            problems.append(f"{name}: we {'allocated' if mine else 'refused'} it, the official allocator finds "
                            f"nodes {step['feasibleNodes']}")
        if mine is None:
            continue
        pinned = step["pinned"]
        if pinned["error"] or pinned["allocation"] is None:
            problems.append(f"{name}: restricted to our devices on {pinned['node']}, the official allocator "
                            f"finds none ({pinned['error']})")
        elif _devices(pinned["allocation"]) != _devices(mine):
            problems.append(f"{name}: official {_devices(pinned['allocation'])} != ours {_devices(mine)}")
        elif _consumed(pinned["allocation"]) != _consumed(mine):
            problems.append(f"{name}: consumed capacity: official {_consumed(pinned['allocation'])} != "
                            f"ours {_consumed(mine)}")
    return problems, sum(1 for c in ours if _ours(c) is not None)


def _panicked(step: dict[str, Any]) -> bool:
    return any((e or "").startswith("panic:") for e in (step["error"], (step["pinned"] or {}).get("error")))


def _counts_several_shares(claim: dict[str, Any]) -> bool:
    """Whether a request of the claim asks for two or more devices: 1.34 checks its k-th device's capacity
    against the k-th device of that device's slice (kubernetes#133705), past the end of a one-card slice."""
    requests = claim["spec"]["devices"]["requests"]
    return any(r["exactly"].get("count", 1) > 1 or r["exactly"].get("allocationMode") == "All" for r in requests)


def check(peer: Peer, newest: Peer, claims: list[dict[str, Any]], *,
          inventory: Path = dra_world.INVENTORY, policy: str | None = None) -> int:
    """Assert agreement (see the module's docstring); the number of claims we allocated."""
    problems, allocated = compare(peer, claims, inventory=inventory, policy=policy)
    if problems and peer.release == "pinned":
        fixed, _ = compare(newest, claims, as_newer=True, inventory=inventory, policy=policy)
        assert not fixed, "the newest allocator disagrees too, on 1.34's input:\n" + "\n".join(fixed)
        return allocated
    assert not problems, f"{len(problems)} of {len(claims)} claims disagree:\n" + "\n".join(problems)
    return allocated


def test_example_claims(peer: Peer, newest_peer: Peer) -> None:
    assert check(peer, newest_peer, dra_world.example_claims()) == 2


def test_example_claims_agree_on_every_release_without_help(peer: Peer) -> None:
    """1.34 too, on its own: one card a slice keeps its capacity check on the card asked for."""
    problems, allocated = compare(peer, dra_world.example_claims())
    assert not problems and allocated == 2


@pytest.mark.parametrize("seed", CORPUS_SEEDS)
def test_generated_corpus(peer: Peer, newest_peer: Peer, seed: int) -> None:
    claims = dra_world.generated_claims(seed, CORPUS_SIZE)
    allocated = check(peer, newest_peer, claims)
    assert 0 < allocated < len(claims)  # the corpus reaches both answers
