"""The distributions ``python -m build`` makes, and a fresh venv with the wheel and no extras."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Dists:
    wheel: Path
    sdist: Path


@dataclass(frozen=True)
class Venv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def cli(self) -> Path:
        return self.root / "bin" / "hami-devices"

    def run(self, *args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run in the venv's own folder: ``python -c`` puts the working folder first on sys.path, and this
        checkout's ``hami_devices`` must not stand in for the installed one."""
        return subprocess.run(
            [str(a) for a in args],
            capture_output=True,
            text=True,
            env=env or clean_env(),
            cwd=self.root,
            timeout=300,
            check=False,
        )


def clean_env() -> dict[str, str]:
    """This environment without anything that could lend the venv a module (PYTHONPATH) or a device."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "HAMI_", "LD_PRELOAD")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """scripts/test.sh builds them once (HAMI_TEST_WHEEL); run alone, this builds them as a user would."""
    given = os.environ.get("HAMI_TEST_WHEEL")
    if given:
        folder = Path(given).parent
    else:
        folder = tmp_path_factory.mktemp("dist")
        build = subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(folder), str(REPO)],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    wheels, sdists = sorted(folder.glob("hami_devices-*.whl")), sorted(folder.glob("hami_devices-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(folder.iterdir())
    return Dists(wheels[0], sdists[0])


@pytest.fixture(scope="session")
def base_venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh venv with ``pip install hami_devices-*.whl``: the runtime dependencies and nothing else.

    Made without pip of its own (this environment's pip installs into it) to save a few seconds;
    dependencies come from pip's cache.
    """
    venv = Venv(tmp_path_factory.mktemp("base") / "venv")
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv.root)], capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, made.stderr
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv.python), "install", "-q", str(dists.wheel)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    return venv
