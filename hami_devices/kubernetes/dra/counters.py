"""The counters a DRA allocation books: partition devices and shared cards of one counter set.

Kubernetes models a card that can be carved (``sharedCounters``) as counters each partition device
consumes, and a card shared by our shares as consuming its whole counter set; the allocator books both so
that a card is shared or partitioned, never both, as the API server's scheduler sees it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from decimal import Decimal

import numpy as np

from hami_devices.kubernetes.dra import names
from hami_devices.kubernetes.dra.catalog import Catalog
from hami_devices.scheduling.cluster import BoolArray
from hami_devices.scheduling.engine import Engine

SetKey = tuple[str, str, str]  # (driver, pool, counter set)


class CounterBook:
    """Which partition devices are taken and how much of each counter set is used, by partitions or shares."""

    def __init__(self, catalog: Catalog, engine: Engine, ours: Sequence[int], uuid_of: Sequence[str]) -> None:
        self.catalog = catalog
        self.engine = engine
        self.uuid_of = uuid_of  # per catalog row: its card's uuid
        devices = catalog.devices
        self.taken: set[int] = set()  # partition devices allocated
        self.used: dict[SetKey, dict[str, Decimal]] = {}
        self.share_holds: Counter[SetKey] = Counter()  # live shares of each set's card
        self.cards_with_counters = [
            i for i in ours if devices[i].kind == names.KIND_DEVICE and devices[i].counter_set is not None
        ]
        self.set_card: dict[SetKey, str] = {  # counter set -> the uuid of the card it belongs to
            (d.driver, d.pool, str(d.counter_set)): str(d.own("uuid"))
            for d in (devices[i] for i in ours)
            if d.counter_set is not None
        }

    def fits(self, row: int, pending: Sequence[int]) -> bool:
        """Whether partition device ``row``'s counters fit beside those in use and those of ``pending``."""
        d = self.catalog.devices[row]
        if d.counter_set is None:
            return True
        key = (d.driver, d.pool, d.counter_set)
        total = self.catalog.counters.get(key, {})
        used = dict(self.used.get(key, {}))
        for other in pending:
            o = self.catalog.devices[other]
            if o.counter_set == d.counter_set and o.pool == d.pool:
                for k, v in o.consumes.items():
                    used[k] = used.get(k, Decimal(0)) + v
        return all(used.get(k, Decimal(0)) + v <= total.get(k, Decimal(0)) for k, v in d.consumes.items())

    def free_to_take(self, row: int, pending: Sequence[int]) -> bool:
        return row not in self.taken and row not in pending and self.fits(row, pending)

    def take(self, row: int) -> None:
        d = self.catalog.devices[row]
        self.taken.add(row)
        if d.counter_set is not None:
            used = self.used.setdefault((d.driver, d.pool, d.counter_set), {})
            for k, v in d.consumes.items():
                used[k] = used.get(k, Decimal(0)) + v

    def free(self, row: int) -> None:
        d = self.catalog.devices[row]
        self.taken.discard(row)
        if d.counter_set is not None:
            used = self.used[(d.driver, d.pool, d.counter_set)]
            for k, v in d.consumes.items():
                used[k] -= v

    def hold_share(self, row: int) -> None:
        """A share of a card that consumes its counter set takes the set, once while any share lives (as the
        API's allocator books a shared device's counters): none of its partitions fits meanwhile."""
        d = self.catalog.devices[row]
        if d.counter_set is None:
            return
        key = (d.driver, d.pool, d.counter_set)
        if self.share_holds[key] == 0:
            used = self.used.setdefault(key, {})
            for k, v in d.consumes.items():
                used[k] = used.get(k, Decimal(0)) + v
        self.share_holds[key] += 1

    def release_share(self, row: int) -> None:
        d = self.catalog.devices[row]
        if d.counter_set is None:
            return
        key = (d.driver, d.pool, d.counter_set)
        self.share_holds[key] -= 1
        if self.share_holds[key] == 0:
            used = self.used[key]
            for k, v in d.consumes.items():
                used[k] -= v

    def partitioned_cards(self) -> BoolArray:
        """Engine rows of cards that consume their counter set while partitions of theirs hold counters:
        no share of them can be granted (the set is not whole)."""
        blocked: BoolArray = np.zeros(self.engine.cluster.size, dtype=np.bool_)
        index = self.engine.cluster.uuid_index
        for row in self.cards_with_counters:
            d = self.catalog.devices[row]
            key = (d.driver, d.pool, str(d.counter_set))
            if self.share_holds[key] == 0 and any(self.used.get(key, {}).values()):
                where = index.get(self.uuid_of[row])
                if where is not None:
                    blocked[where] = True
        return blocked

    def partition_cards_full(self, rows: dict[str, list[int]]) -> BoolArray | None:
        """Engine rows of the cards in ``rows`` (card uuid -> its partition devices of one profile) on which
        none of those devices is free with its counters fitting: a share or other partitions hold the set.
        None when no counter is in use (nothing is blocked). The engine may otherwise pick such a card (it
        lets a vNPU or sMLU instance sit beside a share) and the claim would be refused for want of a device
        while other cards are idle."""
        in_use = [key for key, used in self.used.items() if any(used.values())]
        if not in_use:
            return None
        blocked: BoolArray = np.zeros(self.engine.cluster.size, dtype=np.bool_)
        index = self.engine.cluster.uuid_index
        for key in in_use:
            uuid = self.set_card.get(key)
            devices = rows.get(uuid) if uuid is not None else None
            if devices and not any(self.free_to_take(r, ()) for r in devices):
                where = index.get(uuid) if uuid is not None else None
                if where is not None:
                    blocked[where] = True
        return blocked
