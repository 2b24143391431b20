"""Reads and writes inside one PostgreSQL ledger transaction (``LedgerView``): a round trip each, or fewer."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any, TypeAlias

import psycopg

from hami_devices.errors import UnknownAllocation
from hami_devices.ledger.base import LedgerView
from hami_devices.ledger.changes import Change, follows_on, trim_below
from hami_devices.ledger.event_query import events_query
from hami_devices.ledger.events import USAGE_BUCKET_SECONDS, Event, EventKind, UsageSample
from hami_devices.ledger.row_versions import RowVersions
from hami_devices.models import DeviceHandle, Grant

# TypeAlias: without the [postgresql] extra psycopg is Any, and mypy takes a plain assignment for a variable
Connection: TypeAlias = psycopg.Connection[tuple[Any, ...]]

_WRITTEN_HERE = ""  # the xmin a row written by the open transaction is known by until it is listed again

def _event_from_row(row: Sequence[Any]) -> Event:
    seq, at, kind, allocation_id, uuid, node, data = row
    return Event.model_construct(
        seq=seq, time=at, kind=kind, allocation_id=allocation_id, uuid=uuid, node=node, data=json.loads(data)
    )


class PostgresView(LedgerView):
    def __init__(self, conn: Connection, versions: RowVersions) -> None:
        self._conn = conn
        self._versions = versions
        self._listed: dict[str, str] | None = None  # id -> xmin of the live allocations, once handle_ids ran
        self._changed: dict[str, str] = {}  # id -> body of the allocations changes_since found added
        self.wrote = False  # whether the commit has anything to make durable

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, args).fetchall())

    def grants_on(self, uuid: str) -> list[Grant]:
        return [Grant.model_validate_json(r[0]) for r in self._rows("SELECT body FROM grants WHERE uuid = %s", (uuid,))]

    def get(self, handle_id: str) -> DeviceHandle:
        body = self._changed.get(handle_id)
        if body is not None:
            return DeviceHandle.model_validate_json(body)
        listed = self._listed
        if listed is not None:  # the ids were listed in this transaction: what is not there is gone
            if handle_id not in listed:
                raise UnknownAllocation(handle_id)
            if self._versions.body(handle_id, listed[handle_id]) is None:
                self._fetch(self._versions.unknown(listed))
            body = self._versions.body(handle_id, listed[handle_id])
            if body is not None:
                return DeviceHandle.model_validate_json(body)
        rows = self._rows("SELECT id, xmin::text, body FROM allocations WHERE id = %s", (handle_id,))
        if not rows:
            raise UnknownAllocation(handle_id)
        self._versions.put(*rows[0])
        return DeviceHandle.model_validate_json(rows[0][2])

    def _fetch(self, ids: list[str]) -> None:
        """Every body of ``ids`` in one round trip."""
        for row in self._rows("SELECT id, xmin::text, body FROM allocations WHERE id = ANY(%s::text[])", (ids,)):
            self._versions.put(*row)

    def add(self, handle: DeviceHandle) -> None:
        self.wrote = True
        body = handle.model_dump_json()
        # one statement for the allocation, all its grants and its change: one round trip however many devices
        (generation,) = self._rows(
            "WITH a AS (INSERT INTO allocations (id, body, created_at) VALUES (%s, %s, %s)), "
            "gr AS (INSERT INTO grants (handle_id, uuid, body) "
            "SELECT %s, u, b FROM unnest(%s::text[], %s::text[]) AS g(u, b)) "
            "INSERT INTO allocation_changes (handle_id, added) VALUES (%s, true) RETURNING generation",
            (handle.id, body, handle.created_at, handle.id, [g.uuid for g in handle.grants],
             [g.model_dump_json() for g in handle.grants], handle.id),
        )[0]
        self._trim(generation)
        if self._listed is not None:  # its xmin is this transaction's: known once committed and listed again
            self._listed[handle.id] = _WRITTEN_HERE
            self._versions.put(handle.id, _WRITTEN_HERE, body)

    def remove(self, handle_id: str) -> DeviceHandle:
        self.wrote = True
        rows = self._rows(  # grants cascade; the change is written only when there was an allocation
            "WITH d AS (DELETE FROM allocations WHERE id = %s RETURNING body), "
            "c AS (INSERT INTO allocation_changes (handle_id, added) SELECT %s, false FROM d RETURNING generation) "
            "SELECT d.body, c.generation FROM d, c",
            (handle_id, handle_id),
        )
        self._versions.drop(handle_id)
        self._changed.pop(handle_id, None)
        if self._listed is not None:
            self._listed.pop(handle_id, None)
        if not rows:
            raise UnknownAllocation(handle_id)
        self._trim(rows[0][1])
        return DeviceHandle.model_validate_json(rows[0][0])

    def _trim(self, generation: int) -> None:
        below = trim_below(generation - 1, generation)
        if below is not None:
            self._conn.execute("DELETE FROM allocation_changes WHERE generation <= %s", (below,))

    def generation(self) -> int:
        return int(self._rows("SELECT COALESCE(MAX(generation), 0) FROM allocation_changes")[0][0])

    def changes_since(self, generation: int) -> list[Change] | None:
        # one round trip: the log's bounds, and each change after ``generation`` with the body of what it added
        rows = self._rows(
            "SELECT b.oldest, b.newest, c.generation, c.handle_id, c.added, a.body "
            "FROM (SELECT MIN(generation) AS oldest, COALESCE(MAX(generation), 0) AS newest "
            "FROM allocation_changes) b "
            "LEFT JOIN (allocation_changes c LEFT JOIN allocations a ON c.added AND a.id = c.handle_id) "
            "ON c.generation > %s ORDER BY c.generation",
            (generation,),
        )
        oldest, newest = rows[0][0], rows[0][1]
        if not follows_on(generation, oldest, newest):
            return None
        changes: list[Change] = []
        for _, _, at, handle_id, added, body in rows:
            if at is None:  # the bounds' row alone: nothing changed
                continue
            changes.append(Change(at, handle_id, added))
            if body is not None:
                self._changed[handle_id] = body
        return changes

    def handles(self) -> list[DeviceHandle]:
        rows = self._rows("SELECT id, xmin::text, body FROM allocations ORDER BY created_at, id")
        self._remember(rows)
        return [DeviceHandle.model_validate_json(r[2]) for r in rows]

    def handle_ids_starting(self, prefix: str) -> list[str]:
        rows = self._rows(  # a range on the primary key (COLLATE "C": code-point order)
            "SELECT id FROM allocations WHERE id >= %s AND id < %s ORDER BY created_at, id",
            (prefix, prefix + "\U0010ffff"),
        )
        return [r[0] for r in rows]

    def handle_ids(self) -> list[str]:
        rows = self._rows("SELECT id, xmin::text FROM allocations ORDER BY created_at, id")
        self._listed = dict(rows)
        self._versions.keep_only(self._listed)
        return [r[0] for r in rows]

    def _remember(self, rows: list[tuple[Any, ...]]) -> None:
        self._listed = {handle_id: xmin for handle_id, xmin, _ in rows}
        self._versions.keep_only(self._listed)
        for row in rows:
            self._versions.put(*row)

    def record_event(self, event: Event) -> Event:
        self.wrote = True
        (seq,) = self._rows(
            "INSERT INTO events (time, kind, allocation_id, uuid, node, data) VALUES (%s, %s, %s, %s, %s, %s) "
            "RETURNING seq",
            (event.time, event.kind, event.allocation_id, event.uuid, event.node, json.dumps(event.data)),
        )[0]
        return event.model_copy(update={"seq": seq})

    def events(
        self,
        *,
        after_seq: int = 0,
        since: float | None = None,
        until: float | None = None,
        allocation_id: str | None = None,
        kinds: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        sql, args = events_query(
            "%s",
            after_seq=after_seq,
            since=since,
            until=until,
            allocation_id=allocation_id,
            kinds=kinds,
            limit=limit,
        )
        return [_event_from_row(r) for r in self._rows(sql, args)]

    def last_seq(self) -> int:
        return int(self._rows("SELECT COALESCE(MAX(seq), 0) FROM events")[0][0])

    def prune(self, before: float) -> int:
        self.wrote = True
        lifecycle = [str(k) for k in (EventKind.GRANTED, EventKind.RELEASED, EventKind.EVICTED)]
        ended = [str(k) for k in (EventKind.RELEASED, EventKind.EVICTED)]
        cursor = self._conn.execute(
            "DELETE FROM events WHERE time < %s AND (kind <> ALL(%s::text[]) OR allocation_id IN "
            "(SELECT allocation_id FROM events WHERE kind = ANY(%s::text[]) AND time < %s))",
            (before, lifecycle, ended, before),
        )
        removed = int(cursor.rowcount)
        self._conn.execute("DELETE FROM usage WHERE bucket + %s <= %s", (USAGE_BUCKET_SECONDS, before))
        return removed

    def observations(self, prefix: str) -> dict[str, tuple[float, Any]]:
        # a range scan on the primary key (COLLATE "C": code-point order); LIKE would need escaping
        rows = self._rows(
            "SELECT key, observed_at, value FROM observations WHERE key >= %s AND key < %s",
            (prefix, prefix + "\U0010ffff"),
        )
        return {key: (at, json.loads(value)) for key, at, value in rows}

    def set_observation(self, key: str, observed_at: float, value: Any | None) -> None:
        self.wrote = True
        if value is None:
            self._conn.execute("DELETE FROM observations WHERE key = %s", (key,))
            return
        self._conn.execute(
            "INSERT INTO observations (key, observed_at, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET observed_at = excluded.observed_at, value = excluded.value",
            (key, observed_at, json.dumps(value)),
        )

    def add_usage(self, samples: Sequence[UsageSample]) -> None:
        self.wrote = True
        if not samples:
            return
        with self._conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO usage AS u (bucket, allocation_id, uuid, seconds, memory_mib_seconds, "
                "utilization_seconds, utilization_ratio_seconds) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (bucket, allocation_id, uuid) DO UPDATE SET seconds = u.seconds + excluded.seconds, "
                "memory_mib_seconds = u.memory_mib_seconds + excluded.memory_mib_seconds, "
                "utilization_seconds = u.utilization_seconds + excluded.utilization_seconds, "
                "utilization_ratio_seconds = u.utilization_ratio_seconds + excluded.utilization_ratio_seconds",
                [
                    (
                        s.bucket, s.allocation_id, s.uuid, s.seconds, s.memory_mib_seconds,
                        s.utilization_seconds, s.utilization_ratio_seconds,
                    )
                    for s in samples
                ],
            )

    def usage(self, since: float, until: float) -> list[UsageSample]:
        rows = self._rows(
            "SELECT bucket, allocation_id, uuid, seconds, memory_mib_seconds, utilization_seconds, "
            "utilization_ratio_seconds FROM usage WHERE bucket < %s AND bucket > %s "
            "ORDER BY bucket, allocation_id, uuid",
            (until, since - USAGE_BUCKET_SECONDS),
        )
        return [UsageSample(*row) for row in rows]
