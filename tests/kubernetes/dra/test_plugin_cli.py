"""``hami-devices dra plugin``'s refusals: each names what to fix and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_devices.cli.main import main

from .conftest import INVENTORY


def _serve(tmp_path: Path, *extra: str) -> list[str]:
    return ["dra", "plugin", "--inventory", str(INVENTORY), "--ledger", str(tmp_path / "l.db"),
            "--cdi-dir", str(tmp_path / "cdi"), *extra]


def test_a_node_name_is_required(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(_serve(tmp_path, "--claims-dir", str(tmp_path))) == 2
    assert "--node or $NODE_NAME" in capsys.readouterr().err


def test_a_socket_path_too_long_for_unix_sockets_is_refused(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / ("d" * 120)
    assert main(_serve(tmp_path, "--node", "tiers-a", "--claims-dir", str(tmp_path), "--plugin-dir", str(deep))) == 2
    err = capsys.readouterr().err
    assert "plugin_dir" in err and "longer than a unix socket allows" in err
    assert not deep.exists()


def test_a_missing_claims_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_serve(tmp_path, "--node", "tiers-a", "--claims-dir", str(tmp_path / "nope"),
                       "--registry-dir", str(tmp_path / "r"), "--plugin-dir", str(tmp_path / "p"))) == 2
    assert "claims_dir" in capsys.readouterr().err
    assert not (tmp_path / "r").exists() and not (tmp_path / "p").exists()
