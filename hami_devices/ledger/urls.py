"""Ledger targets written as URLs: which scheme names a database, and how a URL is shown without its password."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

POSTGRESQL_SCHEMES = ("postgresql", "postgres")
"""The URL schemes libpq accepts for a PostgreSQL connection."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HIDDEN = "***"


def url_scheme(target: str) -> str | None:
    """The lower-cased scheme of ``scheme://...``, or None for a plain path (``C:\\x`` and ``./a:b`` included)."""
    found = _SCHEME.match(target)
    return found.group(1).lower() if found else None


def is_postgresql_url(target: object) -> bool:
    return isinstance(target, str) and url_scheme(target) in POSTGRESQL_SCHEMES


def redacted(url: str) -> str:
    """``url`` with its password (in the user part or a ``password=`` parameter) replaced by ``***``.

    A URL that does not even split is shown as its scheme alone: what follows may hold a password.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        scheme = url_scheme(url)
        return f"{scheme}://{_HIDDEN}" if scheme else _HIDDEN
    netloc = parts.netloc
    if password is not None:
        user, _, host = netloc.rpartition("@")
        name = user.partition(":")[0]
        netloc = f"{name}:{_HIDDEN}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key == "password" for key, _ in pairs):
            query = urlencode([(k, _HIDDEN if k == "password" else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def password_of(url: str) -> str | None:
    """The password ``url`` carries, so that a server's message can be scrubbed of it too."""
    try:
        parts = urlsplit(url)
        found = parts.password
        pairs = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return None
    for key, value in pairs:
        if key == "password":
            found = value
    return found or None


def scrubbed(text: str, url: str) -> str:
    """``text`` (a driver's or server's message) on one line, with the password of ``url`` replaced by ``***``,
    as written in the URL and as decoded from it."""
    password = password_of(url)
    if password:
        for secret in {password, unquote(password)}:
            text = text.replace(secret, _HIDDEN)
    return " ".join(text.split())
