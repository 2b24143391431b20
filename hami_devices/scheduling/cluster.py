"""Cluster state for the scoring engine: nodes, devices and what the placements booked on them hold.

A scheduler builds one ``ClusterState`` and then tells it what happens: a node
joins or leaves, a device turns unhealthy, a placement is assumed (optimistic,
before binding), confirmed, or forgotten.  Each event touches only the rows it
concerns; nothing is rebuilt.  The columns live in ``tables``, the rounding
answers and rule masks kept between decisions in ``plans``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import HamiError, InvalidRequest, ReasonCode, UnknownAllocation
from hami_devices.models import DeviceHandle, DeviceInfo, Grant, ResourceRequest, Taint
from hami_devices.rounding import GrantRule
from hami_devices.rules import NODE_RULES, USAGE_CODES, HostDemand, NodeView, Rule, check_grant, failures
from hami_devices.rules.columns import BoolArray, FloatArray, IntArray
from hami_devices.scheduling.bookings import Booking, PlacementState, takes_none
from hami_devices.scheduling.mirroring import LedgerMirror
from hami_devices.scheduling.plans import Plans
from hami_devices.scheduling.tables import UNBOUNDED, NodeState

if TYPE_CHECKING:
    from hami_devices.following import FollowMark

__all__ = [
    "UNBOUNDED",
    "Booking",
    "BoolArray",
    "ClusterState",
    "FloatArray",
    "IntArray",
    "NodeState",
    "PlacementState",
]


_HOST_LIMITS = tuple(r for r in NODE_RULES if r.limit is not None)


class ClusterState(LedgerMirror, Plans):
    """Nodes, devices and what the bookings hold, as arrays (see ``Tables`` for the columns)."""

    def __init__(
        self,
        memory_overcommit: float = 1.0,
        rules: Mapping[str, GrantRule] | None = None,
        *,
        core_capacity: int = 100,
    ) -> None:
        super().__init__(memory_overcommit, rules, core_capacity=core_capacity)
        self.bookings: dict[str, Booking] = {}
        self.conflicts: dict[str, dict[str, list[ReasonCode]]] = {}
        """Booked ledger allocations that break a limit: id -> device uuid or node name -> codes (see ``book``)."""
        self._elsewhere: set[str] = set()  # ledger allocations with nothing on this cluster (``follow``)
        self.followed: FollowMark | None = None
        """Where this state last followed a ledger's change log (``hami_devices.following``)."""
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ nodes
    def add_node(
        self,
        name: str,
        cpu_milli: int,
        memory_mib: int,
        devices: Sequence[DeviceInfo] = (),
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Taint] = (),
    ) -> None:
        self._add_node_row(name, cpu_milli, memory_mib, labels, taints)
        for info in devices:
            self.add_device(name, info)
        self.version += 1

    def add_node_spec(self, spec: Any) -> None:
        """Add an inventory ``NodeSpec`` (name, cpu_milli, memory_mib, labels, taints, devices)."""
        self.add_node(spec.name, spec.cpu_milli, spec.memory_mib, spec.devices, spec.labels,
                      getattr(spec, "taints", ()))

    def remove_node(self, name: str) -> list[Booking]:
        """Remove a node and its devices; returns the bookings that were on it (now forgotten)."""
        node = self._node(name)
        dropped = [
            b
            for b in self.bookings.values()
            if name in (b.host_nodes or (b.node,)) or any(g.node == name for g in b.grants)
        ]
        for booking in dropped:
            self.forget(booking.id)
        for row in list(node.devices):
            self._remove_row(row)
        self._drop_node_row(name)
        self.version += 1
        return dropped

    # ------------------------------------------------------------------ bookings
    def assume(
        self,
        node: str,
        grants: Iterable[Grant],
        *,
        host_cpu_milli: int = 0,
        host_memory_mib: int = 0,
        preemptible: bool = False,
        request: ResourceRequest | None = None,
        booking_id: str | None = None,
        state: PlacementState = PlacementState.ASSUMED,
    ) -> Booking:
        """Book a placement optimistically; every grant is checked by the rules first.

        Host CPU and memory are charged once on ``node`` and once on every other node a
        grant lands on.
        """
        grants = list(grants)
        self._node(node)
        booking_id = booking_id or f"p{next(self._ids)}"
        if booking_id in self.bookings:
            raise InvalidRequest("id", f"placement {booking_id!r} already booked")
        host_nodes = tuple(dict.fromkeys([node, *(g.node for g in grants)]))
        # only what the node holds: a placement already made is booked on a cordoned or tainted node
        host = HostDemand(host_cpu_milli, host_memory_mib)
        short = self._host_failures(host_nodes, host)
        if short:
            name, codes = next(iter(short.items()))
            raise HamiError(f"node {name!r} cannot host this placement: {', '.join(codes)}")
        broken = self._grant_failures(grants)
        if broken:
            uuid, codes = next(iter(broken.items()))
            raise HamiError(f"device {uuid!r} cannot take this grant: {', '.join(codes)}")
        return self._hold(
            Booking(
                id=booking_id,
                node=node,
                grants=grants,
                host_cpu_milli=host_cpu_milli,
                host_memory_mib=host_memory_mib,
                preemptible=preemptible,
                state=state,
                request=request,
                host_nodes=host_nodes,
            )
        )

    def _host_failures(
        self, names: Sequence[str], host: HostDemand, limits: Sequence[Rule[NodeView, HostDemand]] = _HOST_LIMITS
    ) -> dict[str, list[ReasonCode]]:
        """The host ``limits`` (CPU, memory) each of the nodes ``names`` would break taking ``host``."""
        found: dict[str, list[ReasonCode]] = {}
        for name in names:
            nrow = self._node_index[self._node(name).name]
            short = failures(limits, self.node_view(slice(nrow, nrow + 1)), host)
            if short:
                found[name] = short
        return found

    def _grant_failures(self, grants: Sequence[Grant], *, every: bool = False) -> dict[str, list[ReasonCode]]:
        """The device rules each grant breaks on its device as it is now (a device given twice is refused);
        ``every``: an entry for each grant, in order, empty where it breaks none."""
        rows = [self.row(g.uuid) for g in grants]
        if len(set(rows)) != len(rows):
            raise InvalidRequest("grants", "a device appears twice in one placement")
        found: dict[str, list[ReasonCode]] = {}
        for row, grant in zip(rows, grants, strict=True):
            problems = check_grant(self.view(slice(row, row + 1)), grant)
            if problems or every:
                found[grant.uuid] = problems
        return found

    def _hold(self, booking: Booking) -> Booking:
        """Charge what ``booking`` holds to its devices and host nodes, and keep it."""
        for grant in booking.grants:
            row = self.row(grant.uuid)
            self.mem_used[row] += grant.booked_mib  # the share and the context booked on top of it
            self.cores_used[row] += grant.cores
            self.sharers[row] += 1
            self.exclusive[row] |= grant.exclusive
            self.usage[row] = self.usage[row].plus(grant)
            self._refresh(row)
        for name in booking.host_nodes:
            self._charge_host(name, booking.host_cpu_milli, booking.host_memory_mib)
        self.bookings[booking.id] = booking
        self.version += 1
        return booking

    def rebook(
        self,
        booking: Booking,
        node: str | None = None,
        grants: Iterable[Grant] | None = None,
        *,
        state: PlacementState | None = None,
    ) -> Booking:
        """Book a forgotten ``booking`` again: its id, request, host charge and state, where it was or,
        given ``node`` and ``grants``, moved there."""
        return self.assume(
            node or booking.node,
            booking.grants if grants is None else grants,
            host_cpu_milli=booking.host_cpu_milli,
            host_memory_mib=booking.host_memory_mib,
            preemptible=booking.preemptible,
            request=booking.request,
            booking_id=booking.id,
            state=booking.state if state is None else state,
        )

    def _charge_host(self, name: str, cpu_milli: int, memory_mib: int) -> None:
        nrow = self._node_index[name]
        self.node_version[nrow] += 1
        self.node_cpu_free[nrow] -= cpu_milli
        self.node_mem_free[nrow] -= memory_mib
        self.nodes[name].cpu_used += cpu_milli
        self.nodes[name].memory_used += memory_mib

    def book(self, handle: DeviceHandle, *, node: str | None = None, verified: bool = False) -> Booking:
        """Mirror an allocation of the ledger (confirmed); the booking id is the handle id.

        ``node`` hosts the task (default: the handle's host node, else the node of its first grant).
        The ledger is the truth: an allocation that breaks a limit where it is (rows an older
        release or a bug wrote, a device or node that shrank) is booked all the same, and
        ``conflicts`` lists it with the codes it breaks until it is forgotten.  Only the same
        allocation id booked twice is refused.  ``verified``: the caller has just judged it by every rule
        on exactly this state (a commit of its own), so it is not judged again.
        """
        request = handle.request
        host = node or handle.host
        if host is None:
            raise InvalidRequest(
                "node", f"allocation {handle.id} has no grants and names no node: say which node hosts it"
            )
        held = self.bookings.get(handle.id)
        if held is not None:
            raise InvalidRequest(
                "handle", f"allocation {handle.id} is already booked ({held.state}): forget it before booking it again"
            )
        self._node(host)
        grants = list(handle.grants)
        host_nodes = tuple(dict.fromkeys([host, *(g.node for g in grants)]))
        broken = {} if verified else self._broken(grants, host_nodes, request)
        booking = self._hold(Booking.confirmed(handle.id, host, grants, request, host_nodes))
        if broken:
            self.conflicts[handle.id] = broken
        return booking

    def _broken(
        self, grants: Sequence[Grant], host_nodes: Sequence[str], request: ResourceRequest
    ) -> dict[str, list[ReasonCode]]:
        """The limits an allocation of the ledger breaks where it is, before it is charged."""
        demand = HostDemand(request.host_cpu_milli, request.host_memory_mib)
        # blamed only for what it takes: a row holding no host CPU does not put a node past its CPU
        taken = [r for r in _HOST_LIMITS if r.limit is not None and r.limit.need(demand) > 0]
        broken = self._host_failures(host_nodes, demand, taken)
        for grant, (uuid, codes) in zip(grants, self._grant_failures(grants, every=True).items(), strict=True):
            codes = [c for c in codes if c in USAGE_CODES and not takes_none(grant, c)]
            if codes:
                broken[uuid] = codes
        return broken

    def host_refusals(self, names: Iterable[str], host: HostDemand) -> dict[str, list[ReasonCode]]:
        """Every node rule (selector, taints, schedulable, CPU, memory) each of the nodes ``names`` breaks for
        a process taking ``host`` there now; nodes that pass are left out."""
        return self._host_failures(list(names), host, NODE_RULES)

    def unbook(self, handle: DeviceHandle | str) -> Booking:
        """Forget a mirrored allocation after its release."""
        return self.forget(handle if isinstance(handle, str) else handle.id)

    def confirm(self, booking_id: str) -> Booking:
        booking = self._booking(booking_id)
        booking.state = PlacementState.CONFIRMED
        self.version += 1
        return booking

    def forget(self, booking_id: str) -> Booking:
        """Release a placement (assumed or confirmed) exactly; unknown ids raise."""
        booking = self.bookings.pop(booking_id, None)
        if booking is None:
            raise UnknownAllocation(booking_id)
        self.conflicts.pop(booking_id, None)
        for grant in booking.grants:
            row = self.uuid_index.get(grant.uuid)
            if row is None:  # device removed meanwhile
                continue
            self.mem_used[row] -= grant.booked_mib
            self.cores_used[row] -= grant.cores
            self.sharers[row] -= 1
            if grant.exclusive:
                self.exclusive[row] = False
            self.usage[row] = self.usage[row].minus(grant)
            self._refresh(row)
        for name in booking.host_nodes or (booking.node,):
            if name in self.nodes:
                self._charge_host(name, -booking.host_cpu_milli, -booking.host_memory_mib)
        self.version += 1
        return booking

    def _booking(self, booking_id: str) -> Booking:
        try:
            return self.bookings[booking_id]
        except KeyError:
            raise UnknownAllocation(booking_id) from None

    # ------------------------------------------------------------------ views
    def whole_free_devices(self) -> int:
        """Healthy devices with nothing granted on them."""
        live = self.live_rows()
        return int((self.healthy[live] & (self.sharers[live] == 0)).sum())

    def usage_of(self, uuid: str) -> DeviceUsage:
        """What the bookings hold on one device, in the rules' terms."""
        return self.usage[self.row(uuid)]

    @classmethod
    def from_inventory(
        cls, inventory: Any, memory_overcommit: float = 1.0, rules: Mapping[str, GrantRule] | None = None
    ) -> ClusterState:
        """Build from an ``Inventory`` (anything with ``.nodes`` of NodeSpec).

        ``rules``: the vendor adapters (``VendorRegistry.adapters``), so the engine rounds
        and caps each vendor's devices exactly as its adapter does (``hami_devices.build_engine``
        does this for you).
        """
        state = cls(memory_overcommit, rules)
        for spec in inventory.nodes:
            state.add_node_spec(spec)
        return state

    @classmethod
    def from_devices(cls, devices: Sequence[Any], handles: Iterable[DeviceHandle] = ()) -> ClusterState:
        """Build from ``Device`` objects (``hd.discover``) and the allocations holding them.

        Each device's adapter is its rule.  A node's host CPU and memory come from the
        devices' ``host`` (set for inventory devices); a node nobody described has
        unbounded host resources.  Allocations are booked as confirmed, on the devices
        given; grants on other devices are ignored.
        """
        state = cls(rules={d.info.vendor: d.adapter for d in devices})
        by_node: dict[str, list[Any]] = {}
        for device in devices:
            by_node.setdefault(device.info.node, []).append(device)
        for name, members in by_node.items():
            host = next((d.host for d in members if getattr(d, "host", None) is not None), None)
            cpu, memory = (host.cpu_milli, host.memory_mib) if host is not None else (UNBOUNDED, UNBOUNDED)
            labels = host.labels if host is not None else {}
            taints = host.taints if host is not None else []
            state.add_node(name, cpu, memory, [d.info for d in members], labels, taints)
        state.sync(handles, partial=True)
        return state
