"""Every object we emit goes down the API server's own create path (strict decoding, defaults, conversion to
the internal version, the registry strategy's validation, imperative and declarative): DeviceClasses,
ResourceSlices, and claims with the ``status.allocation`` our allocator writes."""

from __future__ import annotations

import copy
from typing import Any

from tests.kubernetes.peers import dra_world
from tests.kubernetes.peers.conftest import Peer


def _validate(peer: Peer, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = peer.run("validate", {"objects": objects})["results"]
    assert len(results) == len(objects)
    return results


def _invalid(results: list[dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    return [(r["kind"], r["name"], r["errors"]) for r in results if r["errors"]]


def test_published_classes_and_slices_pass(peer: Peer) -> None:
    objects = dra_world.published(dra_world.RELEASE_RULES[peer.release])
    results = _validate(peer, objects)
    assert not _invalid(results)
    assert {r["kind"] for r in results} == {"DeviceClass", "ResourceSlice"}
    slices = [r for r in results if r["kind"] == "ResourceSlice"]
    # 1.34 serves shared devices and partitions only with alpha gates on (the peer turns them on, and says so);
    # the newest release has them on by default.
    assert all(r["droppedByDefault"] for r in slices) is (peer.release == "pinned")


def test_each_release_refuses_the_other_releases_slices(peer: Peer) -> None:
    """Why the slice rules follow the release: 1.34 needs a device's counters in its own slice, 1.35 and newer
    refuse a slice with both devices and counters."""
    other = "1.35" if peer.release == "pinned" else "1.34"
    errors = [e for r in _validate(peer, dra_world.published(other)) for e in r["errors"]]
    if peer.release == "pinned":  # counter sets in slices of their own; 8 sets of 4..12 counters in one slice
        assert errors and all("must reference a counterSet defined in the ResourceSlice" in e
                              or "total number of shared counters must not exceed 32" in e for e in errors), errors
    else:
        assert errors and all("only one of `sharedCounters` or `devices` is allowed" in e for e in errors), errors


def test_allocated_claims_pass_with_their_status(peer: Peer) -> None:
    objects = dra_world.published(dra_world.RELEASE_RULES[peer.release])
    claims = dra_world.example_claims() + dra_world.generated_claims(seed=7, count=40)
    allocated = [c for c in dra_world.allocate_in_order(objects, claims) if (c.get("status") or {}).get("allocation")]
    assert len(allocated) >= 8
    shared = [r for c in allocated for r in c["status"]["allocation"]["devices"]["results"] if "shareID" in r]
    assert shared  # shareIDs, consumedCapacity and whole partition devices all appear
    assert any("shareID" not in r for c in allocated for r in c["status"]["allocation"]["devices"]["results"])
    assert not _invalid(_validate(peer, allocated))


def test_a_share_id_must_be_a_uuid(peer: Peer) -> None:
    """The check the old 16-hex shareIDs failed: the validator does look at them."""
    objects = dra_world.published(dra_world.RELEASE_RULES[peer.release])
    good = dra_world.allocate_in_order(objects, dra_world.example_claims())[0]
    bad = copy.deepcopy(good)
    bad["status"]["allocation"]["devices"]["results"][0]["shareID"] = "b3f11c8af1805bad"
    ok, refused = _validate(peer, [good, bad])
    assert not ok["errors"]
    assert any("shareID" in e and "UUID" in e.upper() for e in refused["errors"]), refused
