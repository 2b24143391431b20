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
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import HamiError, InvalidRequest, UnknownAllocation
from hami_devices.models import DeviceHandle, DeviceInfo, Grant, ResourceRequest, Taint
from hami_devices.rounding import GrantRule
from hami_devices.rules import NODE_RULES, HostDemand, check_grant, failures
from hami_devices.rules.columns import BoolArray, FloatArray, IntArray
from hami_devices.scheduling.plans import Plans
from hami_devices.scheduling.tables import UNBOUNDED, NodeState

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


class PlacementState(StrEnum):
    ASSUMED = "assumed"
    CONFIRMED = "confirmed"


@dataclass
class Booking:
    """What one placement holds in the cluster (the engine's ``Placement`` carries the why).

    ``node`` hosts the task; ``host_nodes`` are every node charged the host CPU and
    memory, once each (a placement split over nodes runs a process on each).
    """

    id: str
    node: str
    grants: list[Grant]
    host_cpu_milli: int
    host_memory_mib: int
    preemptible: bool
    state: PlacementState
    request: ResourceRequest | None = None
    host_nodes: tuple[str, ...] = ()


class ClusterState(Plans):
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
        rows = [self.row(g.uuid) for g in grants]
        if len(set(rows)) != len(rows):
            raise InvalidRequest("grants", "a device appears twice in one placement")
        booking_id = booking_id or f"p{next(self._ids)}"
        if booking_id in self.bookings:
            raise InvalidRequest("id", f"placement {booking_id!r} already booked")
        host_nodes = tuple(dict.fromkeys([node, *(g.node for g in grants)]))
        host = HostDemand(host_cpu_milli, host_memory_mib)
        for name in host_nodes:
            nrow = self._node_index[self._node(name).name]
            # only what the node holds: a placement already made is booked on a cordoned or tainted node
            short = failures(_HOST_LIMITS, self.node_view(slice(nrow, nrow + 1)), host)
            if short:
                raise HamiError(f"node {name!r} cannot host this placement: {', '.join(short)}")
        for row, grant in zip(rows, grants, strict=True):
            problems = check_grant(self.view(slice(row, row + 1)), grant)
            if problems:
                raise HamiError(f"device {grant.uuid!r} cannot take this grant: {', '.join(problems)}")
        booking = Booking(
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
        for row, grant in zip(rows, grants, strict=True):
            self.mem_used[row] += grant.memory_mib
            self.cores_used[row] += grant.cores
            self.sharers[row] += 1
            self.exclusive[row] |= grant.exclusive
            self.usage[row] = self.usage[row].plus(grant)
            self._refresh(row)
        for name in host_nodes:
            self._charge_host(name, host_cpu_milli, host_memory_mib)
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

    def book(self, handle: DeviceHandle, *, node: str | None = None) -> Booking:
        """Mirror an allocation of the ledger (confirmed); the booking id is the handle id.

        ``node`` hosts the task (default: the handle's host node, else the node of its first grant).
        """
        request = handle.request
        host = node or handle.host
        if host is None:
            raise InvalidRequest(
                "node", f"allocation {handle.id} has no grants and names no node: say which node hosts it"
            )
        if handle.id in self.bookings:
            raise InvalidRequest("handle", f"allocation {handle.id} is already booked")
        try:
            return self.assume(
                host,
                handle.grants,
                host_cpu_milli=request.host_cpu_milli,
                host_memory_mib=request.host_memory_mib,
                preemptible=request.preemptible,
                request=request,
                booking_id=handle.id,
                state=PlacementState.CONFIRMED,
            )
        except HamiError:
            held = self._holding(handle.grants)
            if held is None:
                raise
            raise InvalidRequest(
                "handle",
                f"allocation {handle.id} is already booked, as placement {held.id} ({held.state}): confirm or "
                "forget that booking rather than book the allocation again",
            ) from None

    def _holding(self, grants: Sequence[Grant]) -> Booking | None:
        """A booking holding exactly these shares (devices, memory, cores), if any."""
        want = sorted((g.uuid, g.memory_mib, g.cores) for g in grants)
        return next((b for b in self.bookings.values()
                     if sorted((g.uuid, g.memory_mib, g.cores) for g in b.grants) == want), None)

    def unbook(self, handle: DeviceHandle | str) -> Booking:
        """Forget a mirrored allocation after its release."""
        return self.forget(handle if isinstance(handle, str) else handle.id)

    def sync(self, handles: Iterable[DeviceHandle], *, partial: bool = False) -> None:
        """Make the confirmed bookings exactly ``handles`` (a ledger's, after a restart or a missed event).

        Assumed placements that are not yet in the ledger are kept.  With ``partial`` the
        cluster holds only some of the ledger's devices: grants on the others are ignored.
        """
        live = {h.id: h for h in handles}
        for booking in list(self.bookings.values()):
            if booking.state == PlacementState.CONFIRMED and booking.id not in live:
                self.forget(booking.id)
        for handle_id, handle in live.items():
            held = self.bookings.get(handle_id)
            if held is not None:
                held.state = PlacementState.CONFIRMED
            elif not partial:
                self.book(handle)
            else:
                grants = [g for g in handle.grants if g.uuid in self.uuid_index]
                if grants:
                    self.book(handle.model_copy(update={"grants": grants}))
                elif not handle.grants and handle.node in self.nodes:  # a host-only allocation on a node here
                    self.book(handle)

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
        for grant in booking.grants:
            row = self.uuid_index.get(grant.uuid)
            if row is None:  # device removed meanwhile
                continue
            self.mem_used[row] -= grant.memory_mib
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
