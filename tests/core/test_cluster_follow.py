"""A cluster state kept in step with a ledger by allocation id (``ClusterState.follow``), the way every commit
reads what the ledger holds: only allocations it has not booked are fetched, identity is the id, and an
allocation on devices of another cluster is asked for once."""

from __future__ import annotations

from hami_devices.inventory import parse_inventory
from hami_devices.models import DeviceHandle, Grant, ResourceRequest
from hami_devices.scheduling.cluster import ClusterState

INVENTORY = parse_inventory(
    {"nodes": [{"name": "n", "cpu_milli": 8_000, "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}]}]}
)


def _share(handle_id: str, uuid: str, memory: int, cpu: int = 0) -> DeviceHandle:
    grant = Grant(uuid=uuid, node="n", vendor="nvidia", model="T4", index=0, part=0, memory_mib=memory, cores=0)
    request = ResourceRequest.single(memory_mib=memory, host_cpu_milli=cpu)
    return DeviceHandle(id=handle_id, request=request, grants=[grant])


class Ledger:
    """The rows a ledger holds, and how often each was fetched."""

    def __init__(self, *handles: DeviceHandle) -> None:
        self.rows = {h.id: h for h in handles}
        self.fetched: list[str] = []

    def get(self, handle_id: str) -> DeviceHandle:
        self.fetched.append(handle_id)
        return self.rows[handle_id]


def test_only_what_changed_is_fetched_and_identity_is_the_id() -> None:
    cluster = ClusterState.from_inventory(INVENTORY)
    first, second = (d.uuid for d in INVENTORY.nodes[0].devices)
    ledger = Ledger(_share("a", first, 1_000, cpu=500), _share("b", first, 2_000), _share("c", second, 4_000))
    assert cluster.follow(list(ledger.rows), ledger.get) == 3
    assert cluster.usage_of(first).memory_mib == 3_000 and cluster.usage_of(second).memory_mib == 4_000
    assert cluster.nodes["n"].cpu_used == 500
    assert cluster.follow(list(ledger.rows), ledger.get) == 0  # nothing new: nothing decoded again
    del ledger.rows["a"]
    ledger.rows["d"] = _share("d", second, 500)
    assert cluster.follow(list(ledger.rows), ledger.get) == 1
    assert ledger.fetched == ["a", "b", "c", "d"]
    assert set(cluster.bookings) == {"b", "c", "d"}
    assert cluster.usage_of(first).memory_mib == 2_000 and cluster.usage_of(second).memory_mib == 4_500
    assert cluster.nodes["n"].cpu_used == 0


def test_an_allocation_on_another_clusters_devices_is_asked_for_once() -> None:
    cluster = ClusterState.from_inventory(INVENTORY)
    ledger = Ledger(_share("far", "GPU-elsewhere", 1_000))
    for _ in range(3):
        assert "far" not in cluster.bookings
        cluster.follow(list(ledger.rows), ledger.get, partial=True)
    assert ledger.fetched == ["far"]
    assert cluster.bookings == {}


def test_follow_changes_reads_what_changed_by_the_last_change_of_each_id() -> None:
    cluster = ClusterState.from_inventory(INVENTORY)
    first, second = (d.uuid for d in INVENTORY.nodes[0].devices)
    ledger = Ledger(_share("a", first, 1_000), _share("b", first, 2_000))
    assert cluster.follow_changes([("a", True), ("b", True)], ledger.get) == 2
    # "b" released and granted again under its id on the other device; "c" granted and released between looks
    ledger.rows["b"] = _share("b", second, 3_000)
    ledger.rows["d"] = _share("d", second, 500)
    changes = [("b", False), ("c", True), ("b", True), ("c", False), ("d", True), ("a", False)]
    del ledger.rows["a"]
    assert cluster.follow_changes(changes, ledger.get) == 2
    assert ledger.fetched == ["a", "b", "b", "d"]  # never "c": gone before it was read
    assert set(cluster.bookings) == {"b", "d"}
    assert cluster.usage_of(first).memory_mib == 0 and cluster.usage_of(second).memory_mib == 3_500


def test_follow_changes_confirms_an_assumed_placement_the_ledger_now_holds() -> None:
    cluster = ClusterState.from_inventory(INVENTORY)
    first = INVENTORY.nodes[0].devices[0].uuid
    held = _share("mine", first, 1_000)
    cluster.assume("n", held.grants, booking_id="mine")
    ledger = Ledger(held)
    assert cluster.follow_changes([("mine", True)], ledger.get) == 0
    assert cluster.bookings["mine"].state.value == "confirmed" and ledger.fetched == []
    assert cluster.follow_changes([("mine", False)], ledger.get) == 0
    assert cluster.bookings == {} and cluster.usage_of(first).memory_mib == 0
