"""The extras a missing module is blamed on are the ones pyproject.toml declares, and they install it."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import packages_distributions

from hami_devices.extras import EXTRA_OF_MODULE

from .conftest import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _installs(extra: str) -> set[str]:
    """Distribution names an extra pulls in, following ``hami-devices[...]`` self-references."""
    names: set[str] = set()
    for requirement in PROJECT["optional-dependencies"][extra]:
        if _name(requirement) == "hami-devices":
            for inner in re.search(r"\[(.*)\]", requirement).group(1).split(","):  # type: ignore[union-attr]
                names |= _installs(inner.strip())
        else:
            names.add(_name(requirement))
    return names


def test_each_optional_module_comes_with_the_extra_it_names() -> None:
    providers = packages_distributions()  # this venv has every extra installed
    for module, extra in EXTRA_OF_MODULE.items():
        assert extra in PROJECT["optional-dependencies"], (module, extra)
        provided_by = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        assert provided_by & _installs(extra), (module, extra, provided_by, _installs(extra))


def test_the_core_needs_none_of_them() -> None:
    core = {_name(r) for r in PROJECT["dependencies"]}
    optional = {name for extra in set(EXTRA_OF_MODULE.values()) for name in _installs(extra)}
    assert not core & optional, core & optional
    assert {"pytest", "hypothesis", "matplotlib"} <= optional
    assert _installs("test") >= _installs("conformance") | _installs("plot")
