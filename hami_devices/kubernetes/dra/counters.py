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

from hami_devices.kubernetes.dra.catalog import Catalog
from hami_devices.scheduling.cluster import BoolArray
from hami_devices.scheduling.engine import Engine


class Counters:
    """The counter book of a ``DraAllocator`` (its state is set up by the allocator)."""

    catalog: Catalog
    _taken: set[int]
    _counters_used: dict[tuple[str, str, str], dict[str, Decimal]]
    _share_holds: Counter[tuple[str, str, str]]
    _cards_with_counters: list[int]
    _uuid_of: list[str]
    _set_card: dict[tuple[str, str, str], str]  # counter set -> the uuid of the card it belongs to
    engine: Engine

    # ------------------------------------------------------------------ counters
    def _fits(self, row: int, pending: Sequence[int]) -> bool:
        d = self.catalog.devices[row]
        if d.counter_set is None:
            return True
        key = (d.driver, d.pool, d.counter_set)
        total = self.catalog.counters.get(key, {})
        used = dict(self._counters_used.get(key, {}))
        for other in pending:
            o = self.catalog.devices[other]
            if o.counter_set == d.counter_set and o.pool == d.pool:
                for k, v in o.consumes.items():
                    used[k] = used.get(k, Decimal(0)) + v
        return all(used.get(k, Decimal(0)) + v <= total.get(k, Decimal(0)) for k, v in d.consumes.items())

    def _take_counters(self, row: int) -> None:
        d = self.catalog.devices[row]
        self._taken.add(row)
        if d.counter_set is not None:
            used = self._counters_used.setdefault((d.driver, d.pool, d.counter_set), {})
            for k, v in d.consumes.items():
                used[k] = used.get(k, Decimal(0)) + v

    def _hold_share(self, row: int) -> None:
        """A share of a card that consumes its counter set takes the set, once while any share lives (as the
        API's allocator books a shared device's counters): none of its partitions fits meanwhile."""
        d = self.catalog.devices[row]
        if d.counter_set is None:
            return
        key = (d.driver, d.pool, d.counter_set)
        if self._share_holds[key] == 0:
            used = self._counters_used.setdefault(key, {})
            for k, v in d.consumes.items():
                used[k] = used.get(k, Decimal(0)) + v
        self._share_holds[key] += 1

    def _release_share(self, row: int) -> None:
        d = self.catalog.devices[row]
        if d.counter_set is None:
            return
        key = (d.driver, d.pool, d.counter_set)
        self._share_holds[key] -= 1
        if self._share_holds[key] == 0:
            used = self._counters_used[key]
            for k, v in d.consumes.items():
                used[k] -= v

    def _partitioned_cards(self) -> BoolArray:
        """Engine rows of cards that consume their counter set while partitions of theirs hold counters:
        no share of them can be granted (the set is not whole)."""
        blocked: BoolArray = np.zeros(self.engine.cluster.size, dtype=np.bool_)
        index = self.engine.cluster.uuid_index
        for row in self._cards_with_counters:
            d = self.catalog.devices[row]
            key = (d.driver, d.pool, str(d.counter_set))
            if self._share_holds[key] == 0 and any(self._counters_used.get(key, {}).values()):
                where = index.get(self._uuid_of[row])
                if where is not None:
                    blocked[where] = True
        return blocked

    def _partition_cards_full(self, rows: dict[str, list[int]]) -> BoolArray | None:
        """Engine rows of the cards in ``rows`` (card uuid -> its partition devices of one profile) on which
        none of those devices is free with its counters fitting: a share or other partitions hold the set.
        None when no counter is in use (nothing is blocked). The engine may otherwise pick such a card (it
        lets a vNPU or sMLU instance sit beside a share) and the claim would be refused for want of a device
        while other cards are idle."""
        in_use = [key for key, used in self._counters_used.items() if any(used.values())]
        if not in_use:
            return None
        blocked: BoolArray = np.zeros(self.engine.cluster.size, dtype=np.bool_)
        index = self.engine.cluster.uuid_index
        for key in in_use:
            uuid = self._set_card.get(key)
            devices = rows.get(uuid) if uuid is not None else None
            if devices and not any(r not in self._taken and self._fits(r, ()) for r in devices):
                where = index.get(uuid) if uuid is not None else None
                if where is not None:
                    blocked[where] = True
        return blocked

    def _free_counters(self, row: int) -> None:
        d = self.catalog.devices[row]
        self._taken.discard(row)
        if d.counter_set is not None:
            used = self._counters_used[(d.driver, d.pool, d.counter_set)]
            for k, v in d.consumes.items():
                used[k] -= v

