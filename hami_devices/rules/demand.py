"""What a request part needs of each device: the plain share, or what the vendor's rounding gives.

The ``FIT`` rules judge a ``Demand``: per device row, the MiB, cores and
exclusivity the part would take there.  On a device whose rule gives plain
shares that is the part's own memory (``RequestPart.memory_for``), cores and
exclusivity; on any other device it is the grant the vendor's ``plan_grant``
rounds the part to, or the code it refused with.  ``plan`` is the one place
that asks a vendor to round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import ReasonCode
from hami_devices.models import ACCELERATOR_TAINT, DeviceInfo, Grant, RequestPart, ResourceRequest, Taint, Toleration
from hami_devices.rounding import GrantRule
from hami_devices.rules.columns import BoolArray, IntArray


@dataclass
class Demand:
    """Per row of a view: what the part takes (``memory``, ``cores``, ``exclusive``, and the ``context``
    booked on top of its memory), or that the rounding refused it (``refused``, with the rounding's own
    ``codes``)."""

    memory: IntArray
    cores: IntArray | int
    exclusive: BoolArray | bool
    refused: BoolArray
    codes: IntArray | None = None  # per row where refused: the rounding's code as a position in DEVICE_CODES, or -1
    context: IntArray | int = 0  # per row: MiB of the grant's context (``Grant.context_mib``)

    @classmethod
    def plain(cls, part: RequestPart, memory: IntArray, contexts: IntArray) -> Demand:
        """The plain share on each row, with one context of the row's model (``contexts``, the ``context_mib``
        column) booked on top unless the part is exclusive, as ``Grant.on`` books it."""
        context = 0 if part.exclusive else contexts
        return cls(memory, part.cores, part.exclusive, np.zeros(memory.shape, dtype=bool), context=context)

    @property
    def booked(self) -> IntArray:
        """MiB the part takes of each row's memory in the books: its share and its context."""
        return self.memory + self.context

    def take(self, at: IntArray | slice) -> Demand:
        """The demand at rows ``at`` of the rows this demand covers."""
        return Demand(
            self.memory[at],
            self.cores if isinstance(self.cores, int) else self.cores[at],
            self.exclusive if isinstance(self.exclusive, bool) else self.exclusive[at],
            self.refused[at],
            None if self.codes is None else self.codes[at],
            self.context if isinstance(self.context, int) else self.context[at],
        )

    @classmethod
    def of_grants(cls, grants: Sequence[Grant]) -> Demand:
        return cls(
            np.array([g.memory_mib for g in grants], dtype=np.int64),
            np.array([g.cores for g in grants], dtype=np.int64),
            np.array([g.exclusive for g in grants], dtype=bool),
            np.zeros(len(grants), dtype=bool),
            context=np.array([g.context_mib for g in grants], dtype=np.int64),
        )


@dataclass(frozen=True)
class HostDemand:
    """What a request takes of the node that hosts (a process of) it, and what it asks of such a node:
    labels it must carry (``node_selector``) and the taints it tolerates."""

    cpu_milli: int
    memory_mib: int
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    with_devices: bool = False  # a request with device parts tolerates the accelerator taint

    @classmethod
    def of(cls, request: ResourceRequest) -> HostDemand:
        return cls(
            request.host_cpu_milli,
            request.host_memory_mib,
            tuple(request.node_selector.items()),
            tuple(request.tolerations),
            bool(request.parts),
        )

    def tolerates(self, taint: Taint) -> bool:
        if self.with_devices and taint.key == ACCELERATOR_TAINT:
            return True
        return any(t.tolerates(taint) for t in self.tolerations)


@dataclass(frozen=True)
class Apart:
    """The node rows a part must keep off: those its anti-affine sibling parts were placed on."""

    nodes: IntArray


def memory_need(part: RequestPart, totals: IntArray) -> IntArray:
    """``part.memory_for(total)`` for each of ``totals`` (few distinct values: each is asked once)."""
    if part.memory_mib is not None:
        return np.full(totals.shape, part.memory_mib)  # an int fills int64
    distinct, where = np.unique(totals.ravel(), return_inverse=True)  # flat: numpy 1 and 2 shape it alike
    needs = np.fromiter((part.memory_for(int(t)) for t in distinct), dtype=np.int64)
    return needs[where].reshape(totals.shape)


def plain_share(info: DeviceInfo, part: RequestPart, part_index: int) -> Grant:
    """The grant a part gets on a device whose rule gives plain shares."""
    return Grant.on(info, part_index, part.memory_for(info.memory_mib), part.cores, exclusive=part.exclusive)


def plan(rule: GrantRule, info: DeviceInfo, part: RequestPart, part_index: int,
         usage: DeviceUsage) -> Grant | ReasonCode:
    """The grant ``part`` rounds to on this device now: the plain share where the rule gives one, else the
    vendor's ``plan_grant``."""
    if part.partition is None and rule.plain_shares(info):
        return plain_share(info, part, part_index)
    return rule.plan_grant(info, part, part_index, usage)
