"""The site's hook: a link that leaves docs/ shows the repository path it names (GitHub still follows it); a link
to a file that does not exist is a warning, which the strict build turns into a failure."""

from __future__ import annotations

import importlib.util
import logging
from types import ModuleType

import pytest

from .conftest import DOCS, REPO


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", REPO / "scripts" / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_links_out_of_docs_become_paths_and_pages_stay_links() -> None:
    rewrite = _hooks().rewrite_links
    text = "\n".join([
        "[the plugin](../examples/vendor-plugin/README.md) and [`setup.py`](../setup.py)",
        "[Security](security.md#where-tenants-are-not-trusted) and [a site](https://example.org/x.md)",
        "```sh",
        "[not a link](../nowhere.md)",
        "```",
    ])
    out = rewrite(text, DOCS, DOCS, DOCS, REPO, "page.md").split("\n")
    assert out[0] == "the plugin (`examples/vendor-plugin/README.md`) and `setup.py`"
    assert out[1] == "[Security](security.md#where-tenants-are-not-trusted) and [a site](https://example.org/x.md)"
    assert out[3] == "[not a link](../nowhere.md)"


def test_an_included_files_links_into_docs_are_made_relative_to_the_page() -> None:
    rewrite = _hooks().rewrite_links
    out = rewrite("[limiter](../../docs/limiter.md#how-it-holds-a-share)", REPO / "examples" / "vendor-plugin",
                  DOCS / "guides", DOCS, REPO, "examples/vendor-plugin/README.md")
    assert out == "[limiter](../limiter.md#how-it-holds-a-share)"


def test_a_link_to_a_missing_file_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    rewrite = _hooks().rewrite_links
    with caplog.at_level(logging.WARNING):
        rewrite("[gone](../examples/no-such-file.yaml)", DOCS, DOCS, DOCS, REPO, "page.md")
    assert any("no-such-file.yaml" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
