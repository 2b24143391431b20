"""The peer program is built from the pinned release and from the newest one, as the mod files say."""

from __future__ import annotations

import re

from tests.kubernetes.peers.conftest import HERE, RELEASES, Peer


def _pinned_version(modfile: str) -> str:
    found = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", (HERE / modfile).read_text(), re.M)
    assert found, modfile
    return found.group(1)


def test_linked_release_is_the_mod_files(peer: Peer) -> None:
    modfile, _ = RELEASES[peer.release]
    wanted = _pinned_version(modfile)
    assert peer.kubernetes == wanted
    staging = "v0." + wanted.split(".", 1)[1]  # k8s.io/kubernetes v1.X.Y <-> staging modules v0.X.Y
    for module in ("k8s.io/api", "k8s.io/apimachinery", "k8s.io/apiserver", "k8s.io/kube-scheduler",
                   "k8s.io/dynamic-resource-allocation"):
        assert peer.modules[module] == staging, module


def test_pinned_is_kubernetes_1_34() -> None:
    assert _pinned_version("go.mod").startswith("v1.34.")
