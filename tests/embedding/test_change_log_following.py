"""An engine built with a ledger follows it by the ledger's change log (``hami_devices.following``).

After its own commit a commit reads no allocation at all; after another writer's it reads exactly what
that writer changed; when its view was changed by hand it lists every id again.  Two engines on one
ledger (SQLite, PostgreSQL) stay in step with it and never book a device past its capacity.  The oracle
is the ledger's own rows, summed here (``held_by_ledger``), and the T4's 15,360 MiB and 100 cores.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

import hami_devices as hd
from hami_devices.ledger import LedgerView
from hami_devices.ledger.opening import LedgerTarget, open_ledger
from tests.embedding.test_engine_ledger import SHARE, WHOLE_T4, held_by_engine, held_by_ledger

T4_MIB = 15_360


class CountedView:
    """The ledger's own view; every call it answers is counted by name."""

    def __init__(self, view: LedgerView, calls: Counter[str]) -> None:
        self._view = view
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._view, name)
        if not callable(found):
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._calls[name] += 1
            return found(*args, **kwargs)

        return counted


class CountingLedger(hd.SqliteLedger):
    """A SQLite ledger whose views count the reads made through them."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: Counter[str] = Counter()

    @contextmanager
    def transaction(self) -> Iterator[LedgerView]:
        with super().transaction() as view:
            yield CountedView(view, self.calls)  # type: ignore[misc]

    @contextmanager
    def reading(self) -> Iterator[LedgerView]:
        with super().reading() as view:
            yield CountedView(view, self.calls)  # type: ignore[misc]

    def reads(self, action: Callable[[], Any]) -> Counter[str]:
        self.calls.clear()
        action()
        return Counter({k: v for k, v in self.calls.items() if k in ("handle_ids", "get", "changes_since")})


def test_a_commit_reads_only_what_changed_since_the_engine_last_looked(small_inventory: Path, tmp_path: Path) -> None:
    ledger = CountingLedger(tmp_path / "ledger.db")
    ours = hd.build_engine(small_inventory, ledger=ledger)
    theirs = hd.build_engine(small_inventory, ledger=hd.SqliteLedger(tmp_path / "ledger.db"))
    assert ledger.reads(lambda: ours.allocate(SHARE))["handle_ids"] == 1  # the first look lists every id
    after_own = ledger.reads(lambda: ours.allocate(SHARE))
    assert after_own["handle_ids"] == 0 and after_own["get"] == 0 and after_own["changes_since"] >= 1
    other = theirs.allocate(WHOLE_T4)
    after_other = ledger.reads(lambda: ours.allocate(SHARE))
    assert after_other["handle_ids"] == 0 and after_other["get"] == 1  # theirs alone is read
    assert other.id in ours.cluster.bookings
    theirs.release(other)
    assert ledger.reads(ours.refresh)["handle_ids"] == 0
    assert other.id not in ours.cluster.bookings
    assert held_by_engine(ours) == held_by_ledger(ledger)
    # changed by hand, the engine's view no longer matches any generation: the next look lists every id
    mine = next(iter(ours.cluster.bookings))
    ours.cluster.unbook(mine)
    assert ledger.reads(ours.refresh)["handle_ids"] == 1
    assert mine in ours.cluster.bookings and held_by_engine(ours) == held_by_ledger(ledger)


def test_an_id_released_and_granted_again_elsewhere_is_read_again(small_inventory: Path, tmp_path: Path) -> None:
    ours = hd.build_engine(small_inventory, ledger=hd.SqliteLedger(tmp_path / "ledger.db"))
    theirs = hd.build_engine(small_inventory, ledger=hd.SqliteLedger(tmp_path / "ledger.db"))
    ours.allocate(SHARE)
    first = theirs.allocate(SHARE, handle_id="job-1")
    ours.refresh()
    theirs.release(first)
    again = theirs.allocate(WHOLE_T4, handle_id="job-1")  # a retrying writer reuses the id for a new grant
    assert again.grants[0].uuid != first.grants[0].uuid or again.grants[0].cores != first.grants[0].cores
    ours.refresh()
    assert held_by_engine(ours) == held_by_ledger(ours.committer.ledger)  # type: ignore[union-attr]


def _capacity_kept(held: dict[str, tuple[int, int, int]]) -> bool:
    return all(memory <= T4_MIB and cores <= 100 for memory, cores, _ in held.values())


def test_two_engines_on_one_ledger_stay_in_step_and_never_overbook(
    small_inventory: Path, ledger_target: LedgerTarget
) -> None:
    ledgers = [open_ledger(ledger_target), open_ledger(ledger_target)]
    engines = [hd.build_engine(small_inventory, ledger=ledger) for ledger in ledgers]
    live: list[list[str]] = [[], []]
    rng = random.Random(38)
    for step in range(40):
        who = step % 2
        engine = engines[who]
        if live[who] and rng.random() < 0.35:
            engine.release(live[who].pop(rng.randrange(len(live[who]))))
        else:
            with suppress(hd.InsufficientResources):  # a whole T4 when every T4 is shared: refused, as it should
                live[who].append(engine.allocate(rng.choice([SHARE, SHARE, WHOLE_T4])).id)
        held = held_by_ledger(ledgers[0])
        assert _capacity_kept(held)
        assert held_by_engine(engine) == held  # the acting engine read what the other did in its own commit
    for engine in engines:
        engine.refresh()
        assert held_by_engine(engine) == held_by_ledger(ledgers[0])
        assert sorted(engine.cluster.bookings) == sorted(h.id for h in ledgers[0].handles())
    for ledger in ledgers:
        ledger.close()


@pytest.fixture(autouse=True)
def _regions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_REGION_DIR", str(tmp_path / "regions"))
