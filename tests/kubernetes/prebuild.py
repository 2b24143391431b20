"""Build (or find in the cache) every Go program the Kubernetes tests run: ``python -m tests.kubernetes.prebuild``.

scripts/test.sh starts it in the background before pytest, so that on a cold machine Kubernetes compiles on the
core pytest leaves idle; a test that needs a binary still being built waits on gobuild's lock for it.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.kubernetes.cluster.controlplane import binaries
from tests.kubernetes.gobuild import build
from tests.kubernetes.helm.chart import helm_binary
from tests.kubernetes.kubelet.harness import build_driver
from tests.kubernetes.peers.conftest import RELEASES, built_peer


def main() -> None:
    started = time.monotonic()
    image_tool = Path(__file__).resolve().parents[2] / "scripts" / "image"  # scripts/build-image.sh's layout writer
    print(f"ocilayout: {build(str(image_tool), '.', 'ocilayout')} ({time.monotonic() - started:.0f} s)", flush=True)
    print(f"kubeletdriver: {build_driver()} ({time.monotonic() - started:.0f} s)", flush=True)
    for release in sorted(RELEASES):  # the peers share the pinned release's compiled packages with the rest
        print(f"hamipeer-{release}: {built_peer(release).binary} ({time.monotonic() - started:.0f} s)", flush=True)
    for name, path in binaries().items():
        print(f"{name}: {path} ({time.monotonic() - started:.0f} s)", flush=True)
    print(f"helm: {helm_binary()} ({time.monotonic() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
