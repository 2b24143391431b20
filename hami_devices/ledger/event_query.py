"""The one query behind ``LedgerView.events``, for any SQL ledger: its filters written once, in the driver's
placeholder style (``?`` for sqlite3, ``%s`` for psycopg)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

EVENT_COLUMNS = "seq, time, kind, allocation_id, uuid, node, data"


def events_query(
    placeholder: str,
    *,
    after_seq: int,
    since: float | None,
    until: float | None,
    allocation_id: str | None,
    kinds: Collection[str] | None,
    limit: int | None,
) -> tuple[str, list[Any]]:
    """The SQL and its arguments: events after ``after_seq`` that match every filter given, oldest first."""
    where: list[str] = [f"seq > {placeholder}"]
    args: list[Any] = [after_seq]
    for clause, value in (("time >=", since), ("time <", until), ("allocation_id =", allocation_id)):
        if value is not None:
            where.append(f"{clause} {placeholder}")
            args.append(value)
    if kinds is not None:
        names = [str(k) for k in kinds]
        # an empty IN () is an error to PostgreSQL: no kind asked for matches no event
        where.append(f"kind IN ({', '.join([placeholder] * len(names))})" if names else "1 = 0")
        args.extend(names)
    sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY seq"
    if limit is not None:
        sql += f" LIMIT {placeholder}"
        args.append(limit)
    return sql, args
