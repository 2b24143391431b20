"""Module attributes resolved when first asked for: the one mechanism behind each facade's ``__getattr__``.

A facade (``hami_devices``, ``hami_devices.plugin``, ``hami_devices.scheduler``) lists, per name, the
module that defines it.  Names whose module brings numpy or a C extension load on first use, so
importing a facade stays cheap; names that moved to another facade resolve there with a
``DeprecationWarning`` that says where they live now, for one release.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def resolver(
    facade: str,
    namespace: MutableMapping[str, Any],
    on_first_use: Mapping[str, str],
    moved: Mapping[str, str] | None = None,
) -> Callable[[str], Any]:
    """The ``__getattr__`` of module ``facade`` (whose globals are ``namespace``).

    ``on_first_use``: public name -> the module that defines it; kept in ``namespace`` once loaded.
    ``moved``: old public name -> the facade it now belongs to; never kept, so every use warns.
    """
    gone = dict(moved or {})

    def getattr_(name: str) -> Any:
        home = on_first_use.get(name)
        if home is not None:
            value = getattr(importlib.import_module(home), name)
            namespace[name] = value
            return value
        new_home = gone.get(name)
        if new_home is not None:
            warnings.warn(
                f"{facade}.{name} is deprecated: import it from {new_home} (from {new_home} import {name})",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(new_home), name)
        raise AttributeError(f"module {facade!r} has no attribute {name!r}")

    return getattr_


def forwarder(old: str, new: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of a module that moved from ``old`` to ``new``: every name resolves in ``new``
    with a ``DeprecationWarning`` (for one release); ``new`` is imported only when a name is asked for, so the
    old path costs nothing at import time and needs nothing the new home needs until it is used."""

    def getattr_(name: str) -> Any:
        if name.startswith("__"):  # import machinery probes (__path__, __file__ ...): not a user's name
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old} moved to {new}: import {name} from {new} ({old} goes away in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(new), name)

    return getattr_
