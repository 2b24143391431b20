"""Kubernetes' own Go code as the oracle: the ``hamipeer`` program (this directory's Go module), built once
per source digest (``tests/kubernetes/gobuild.py``) at the pinned release (``go.mod``) and at the newest one
the Go module proxy serves (``go.latest.mod``); every test here runs against both.

Every test in this directory carries the ``kubernetes_peers`` marker.  Without a Go toolchain they fail
with the reason: they are never skipped.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.kubernetes.gobuild import build_info

HERE = Path(__file__).parent
RELEASES = {
    "pinned": ("go.mod", ()),
    "latest": ("go.latest.mod", ("k8slatest",)),
}
PEER_TIMEOUT_S = 300


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.kubernetes_peers)


@dataclass
class Peer:
    """One built ``hamipeer``: ``run(verb, request)`` sends the request as JSON and returns the JSON answer."""

    binary: Path
    release: str
    build_s: float
    modules: dict[str, str] = field(default_factory=dict)

    def run(self, verb: str, request: dict[str, Any]) -> dict[str, Any]:
        done = subprocess.run(
            [str(self.binary), verb], input=json.dumps(request), capture_output=True, text=True,
            timeout=PEER_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise AssertionError(f"hamipeer {verb} ({self.release}) failed: {done.stderr}")
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    @property
    def kubernetes(self) -> str:
        return self.modules.get("k8s.io/kubernetes", "?")


def built_peer(release: str) -> Peer:
    modfile, tags = RELEASES[release]
    built = build_info(HERE, ".", f"hamipeer-{release}", modfile=modfile, tags=tags)
    found = Peer(built.path, release, built.seconds)
    found.modules = found.run("version", {})["modules"]
    return found


@pytest.fixture(scope="session", params=sorted(RELEASES))
def peer(request: pytest.FixtureRequest) -> Iterator[Peer]:
    yield built_peer(request.param)


@pytest.fixture(scope="session")
def newest_peer() -> Peer:
    """The newest release's peer, for telling a pinned release's own defects from ours."""
    return built_peer("latest")
