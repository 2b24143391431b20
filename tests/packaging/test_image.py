"""The OCI image scripts/build-image.sh makes: a valid layout, the same digest from the same inputs, every verb runs.

The layout is read here by the OCI image spec (index -> manifest -> config and layers, each blob
named by its sha256), its layers unpacked in order into a root file system, and the image's own
entrypoint run in it: under ``unshare --map-root-user --root`` (a user namespace, no privilege
needed) where the kernel allows it, else ``chroot`` as root.  Run alone with ``pytest -m image``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hami_devices.cli.main import build_parser
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.image

SCRIPT = REPO_ROOT / "scripts" / "build-image.sh"
TOOLS = ("apt-cache", "apt-get", "dpkg-deb", "go", "tar", "git")
EPOCH = "1700000000"
INVENTORY = "/usr/share/hami-devices/examples/cluster.yaml"


@dataclass(frozen=True)
class Image:
    layout: Path
    digest: str
    rootfs: Path
    config: dict[str, Any]
    runner: tuple[str, ...]
    wheel: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The image's entrypoint with ``args``, in its own root file system and environment."""
        return self.inside(*self.config["config"]["Entrypoint"], *args)

    def inside(self, *command: str) -> subprocess.CompletedProcess[str]:
        """``command`` with the image's root and only the image's environment (it has no ``env`` of its own)."""
        env = dict(kv.split("=", 1) for kv in self.config["config"]["Env"])
        return subprocess.run(
            [*self.runner, str(self.rootfs), *command], env=env, capture_output=True, text=True, timeout=300
        )


def build(out: Path, wheel: Path) -> str:
    done = subprocess.run(
        [str(SCRIPT), str(out)], capture_output=True, text=True, timeout=900,
        env={**os.environ, "SOURCE_DATE_EPOCH": EPOCH, "WHEEL": str(wheel)},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1]


def blob(layout: Path, digest: str) -> bytes:
    algorithm, _, hexdigest = digest.partition(":")
    data = (layout / "blobs" / algorithm / hexdigest).read_bytes()
    assert algorithm == "sha256" and hashlib.sha256(data).hexdigest() == hexdigest  # content-addressed
    return data


def unpack(layout: Path, manifest: dict[str, Any], rootfs: Path) -> None:
    for layer in manifest["layers"]:
        assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
        data = gzip.decompress(blob(layout, layer["digest"]))
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(rootfs, filter="tar")


def layer_names(image: Image) -> list[str]:
    """Every path the image's layers hold."""
    manifest = json.loads(blob(image.layout, image.digest))
    names: list[str] = []
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(image.layout, layer["digest"])))) as tar:
            names += tar.getnames()
    return names


def runner(rootfs: Path) -> tuple[str, ...]:
    """How to run a command with ``rootfs`` as its root here: a user namespace, or chroot as root."""
    candidates: list[tuple[str, ...]] = [("unshare", "--map-root-user", "--root")]
    if os.geteuid() == 0:
        candidates.append(("chroot",))
    for candidate in candidates:
        if shutil.which(candidate[0]) is None:
            continue
        probe = [*candidate, str(rootfs), "/usr/bin/python3.11", "-B", "-c", "pass"]  # -B: the probe leaves no cache
        if subprocess.run(probe, capture_output=True).returncode == 0:
            return candidate
    pytest.fail("neither unshare --map-root-user (user namespaces) nor chroot (root) can run the image here")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the image's build tools cannot be obtained here: {', '.join(missing)} not on PATH "
                    "(apt and dpkg of a Debian-family system for the base, go for ocilayout)")
    folder = tmp_path_factory.mktemp("image")
    wheel = the_wheel(folder)
    digest = build(folder / "oci", wheel)
    layout = folder / "oci"
    index = json.loads((layout / "index.json").read_text())
    (entry,) = index["manifests"]
    assert entry["digest"] == digest
    manifest = json.loads(blob(layout, digest))
    config = json.loads(blob(layout, manifest["config"]["digest"]))
    rootfs = folder / "rootfs"
    rootfs.mkdir()
    unpack(layout, manifest, rootfs)
    return Image(layout=layout, digest=digest, rootfs=rootfs, config=config, runner=runner(rootfs), wheel=wheel)


def the_wheel(folder: Path) -> Path:
    """The wheel scripts/test.sh built (HAMI_TEST_WHEEL), else one built here once for both builds."""
    given = os.environ.get("HAMI_TEST_WHEEL")
    if given:
        return Path(given)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(folder),
         str(REPO_ROOT)], capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (wheel,) = folder.glob("hami_devices-*.whl")
    return wheel


def verbs() -> Sequence[str]:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(action.choices)


def test_the_layout_is_an_oci_image(image: Image) -> None:
    assert json.loads((image.layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((image.layout / "index.json").read_text())
    (entry,) = index["manifests"]
    assert entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert entry["annotations"]["org.opencontainers.image.ref.name"].startswith("hami-devices:")
    assert image.config["os"] == "linux" and image.config["architecture"] == "amd64"
    assert image.config["created"] == "2023-11-14T22:13:20Z"  # SOURCE_DATE_EPOCH 1700000000
    # the base is the distribution's own python, not this machine's
    assert (image.rootfs / "usr/bin/python3.11").is_file()
    packages = (image.rootfs / "usr/share/hami-devices-base.packages").read_text().split()
    assert any(p.startswith("python3.11-minimal_") and p.endswith(".deb") for p in packages)
    assert not [name for name in layer_names(image) if "__pycache__" in name]  # in the image, not left by a run


def test_the_entrypoint_runs_every_verb(image: Image) -> None:
    top = image.run("--help")
    assert top.returncode == 0, top.stderr
    for verb in verbs():
        assert verb in top.stdout
    # each verb's help in one interpreter of the image (one process per verb would start Python 25 times)
    script = (
        "import contextlib, io, sys\n"
        "from hami_devices.cli.main import main\n"
        "for verb in sys.argv[1:]:\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        try:\n"
        "            main([verb, '--help'])\n"
        "        except SystemExit as exc:\n"
        "            assert exc.code == 0, (verb, exc.code)\n"
        "    assert 'usage: hami-devices ' + verb in out.getvalue(), verb\n"
        "    print(verb)\n"
    )
    helped = image.inside(image.config["config"]["Entrypoint"][0], "-c", script, *verbs())
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert helped.stdout.split() == list(verbs())


def test_discover_on_the_bundled_example_inventory(image: Image) -> None:
    done = image.run("discover", "--inventory", INVENTORY, "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    devices = found["devices"] if isinstance(found, dict) else found
    # the inventory's own count, read from the file as shipped in the image
    import yaml

    inventory = yaml.safe_load((image.rootfs / INVENTORY.lstrip("/")).read_text())
    expected = sum(
        int(node.get("replicas", 1)) * int(d.get("count", 1)) for node in inventory["nodes"] for d in node["devices"]
    )
    assert len(devices) == expected


def test_the_same_inputs_give_the_same_digest(image: Image, tmp_path: Path) -> None:
    assert build(tmp_path / "oci", image.wheel) == image.digest
