"""The two processes of the kubelet-side tests: our plugin (``hami-devices dra plugin``) and the kubelet's
own registration and DRA client code (``kubeletdriver``, Go, built from this module)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.kubernetes import gobuild

MODULE = Path(__file__).resolve().parent


def build_driver() -> Path:
    return gobuild.build(MODULE, "./kubeletdriver", "kubeletdriver-v1.34.4")


class PluginProcess:
    """``hami-devices dra plugin`` as a DaemonSet would run it, with every path pointed into ``root``."""

    def __init__(self, root: Path, inventory: Path, node: str, *, claims_dir: Path | None = None,
                 kubeconfig: Path | None = None) -> None:
        self.root = root
        self.registry = root / "plugins_registry"
        self.plugin_dir = root / "plugins" / "hami-devices.io"
        self.cdi_dir = root / "cdi"
        self.ledger = root / "ledger.db"
        self.log = root / "plugin.log"
        source = ["--claims-dir", str(claims_dir)] if claims_dir else ["--kubeconfig", str(kubeconfig)]
        self.argv = [
            sys.executable, "-m", "hami_devices.cli.main", "dra", "plugin", "--inventory", str(inventory),
            "--node", node, "--ledger", str(self.ledger), "--cdi-dir", str(self.cdi_dir),
            "--registry-dir", str(self.registry), "--plugin-dir", str(self.plugin_dir), *source,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def registration_socket(self) -> Path:
        return self.registry / "hami-devices.io-reg.sock"

    def start(self, timeout_s: float = 60.0) -> None:
        before = self.log.stat().st_size if self.log.exists() else 0  # a restart appends to the same log
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout_s
        while b"dra plugin: serving" not in self.log.read_bytes()[before:]:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise AssertionError(f"the plugin did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM, as the kubelet's pod deletion sends; the exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, sockets and all left behind."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


class KubeletDriver:
    """The kubelet's plugin manager watching ``registry``; ``call`` sends one JSON command, returns the answer."""

    def __init__(self, binary: Path, registry: Path, log: Path) -> None:
        self._log = open(log, "ab")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [str(binary), "--registry", str(registry), "-v", "4"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
        )

    def call(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"kubeletdriver exited ({self.proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
