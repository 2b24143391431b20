"""Finding and opening a vendor's management library, once per process: what every cffi binding shares.

A binding names its library, the variable that overrides where it is, and where a driver installs it; the
loader tries those places in order and keeps the first that opens (and initialises) for the process's life,
since a vendor library is initialised once and holds its devices' state.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

Library = TypeVar("Library")


class LibraryLoader(Generic[Library]):
    """Opens ``name`` with ``open_library`` from the first of its candidate paths that works.

    ``open_library`` raises ``OSError`` when a path cannot be opened (the next is tried) and may raise
    the binding's ``VendorLibraryError`` when the library opened but would not initialise (that ends
    the search: the library is there, and broken).
    """

    def __init__(
        self,
        name: str,
        override: str,
        search: Callable[[], Sequence[str]],
        open_library: Callable[[str], Library],
    ) -> None:
        self.name = name
        self.override = override
        self.search = search
        self.open_library = open_library
        self._opened: dict[str, Library] = {}
        self._lock = threading.Lock()

    def candidates(self) -> list[str]:
        """Where to look, in order: an explicit override (``$override``) is the only candidate; otherwise
        the binding's search paths, then the bare name for the dynamic loader's own search."""
        chosen = os.environ.get(self.override)
        if chosen:
            return [chosen]
        return [*self.search(), self.name]

    def load(self) -> Library:
        """The first candidate that loads; ``OSError`` naming the last few failures when none does."""
        problems: list[str] = []
        with self._lock:
            for path in self.candidates():
                if path in self._opened:
                    return self._opened[path]
                if os.sep in path and not Path(path).exists():
                    problems.append(f"{path}: not found")
                    continue
                try:
                    library = self.open_library(path)
                except OSError as exc:
                    problems.append(f"{path}: {exc}")
                    continue
                self._opened[path] = library
                return library
        raise OSError(f"{self.name} not loadable ({'; '.join(problems[-3:])})")
