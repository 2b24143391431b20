"""The site builds with MkDocs in strict mode (a broken link, anchor or reference fails it), offline, and its
API reference documents every public name of ``hami_devices``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import mkdocs  # noqa: F401  (the docs extra, which scripts/test.sh installs: pip install -e '.[docs]')
import pytest

import hami_devices
import hami_devices.plugin
import hami_devices.scheduler

from .conftest import REPO


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    dead = "http://127.0.0.1:9"  # any fetch from the network fails: the build must not need one
    env = {**os.environ, "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead,
           "NO_PROXY": "", "no_proxy": "", "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return out


def test_the_site_builds_strict_and_offline(site: Path) -> None:
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    for page in ("index.html", "guides/scheduler-authors.html", "guides/operators.html",
                 "guides/plugin-authors.html", "security.html", "reference/api.html", "results/index.html"):
        assert page in pages, sorted(pages)
    for page in site.rglob("*.html"):
        assert "fonts.googleapis.com" not in page.read_text(), page  # theme.font is off: nothing fetched to read it


@pytest.mark.parametrize("facade", [hami_devices, hami_devices.plugin, hami_devices.scheduler],
                         ids=lambda m: m.__name__)
def test_the_api_reference_documents_every_public_name(site: Path, facade: ModuleType) -> None:
    page = {"hami_devices": "api", "hami_devices.plugin": "plugin", "hami_devices.scheduler": "scheduler"}
    html = (site / "reference" / f"{page[facade.__name__]}.html").read_text()
    public = [name for name in facade.__all__ if name != "__version__"]
    missing = [name for name in public if f'id="{facade.__name__}.{name}"' not in html]
    assert not missing, missing


def test_the_plugin_guide_is_the_example_plugins_readme(site: Path) -> None:
    html = (site / "guides" / "plugin-guide.html").read_text()
    first_heading = (REPO / "examples/vendor-plugin/README.md").read_text().splitlines()[0].lstrip("# ")
    assert first_heading.split(":")[0] in html
    assert "include:" not in html
