"""A real Prometheus server (Debian's ``prometheus``) for the tests: started on a loopback port with a
temporary config, queried over its HTTP API."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: scripts/test.sh installs it (scripts/system-deps.sh)")
    return found


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's vector; raises with Prometheus' own error for a bad expression."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{promql}: {exc.read().decode()}") from None
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(
        self, promql: str, check: Callable[[list[dict[str, Any]]], bool] = bool, timeout_s: float = 30.0
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if check(result):
                return result
            time.sleep(0.25)
        raise AssertionError(f"{promql} never satisfied the check; last result: {result}")


@contextmanager
def prometheus(tmp: Path, target: str, rule_files: list[Path]) -> Iterator[Prometheus]:
    port = free_port()
    config = tmp / "prometheus.yml"
    files = ", ".join(json.dumps(str(p)) for p in rule_files)
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 1s}\n"
        f"rule_files: [{files}]\n"
        f"scrape_configs: [{{job_name: hami, static_configs: [{{targets: [{json.dumps(target)}]}}]}}]\n"
    )
    log = (tmp / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            binary("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not start: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield Prometheus(url)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
