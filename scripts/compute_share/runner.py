"""Starts the worker processes of the plan, each under its allocation's environment, within a time budget.

A case that would not fit in what is left of the budget is skipped (and says so); a worker that fails or runs
past its time is recorded as an error against its case, and the check goes on.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .plan import Group, Limit, Solo, Timing

Result = dict[str, Any]


def _say(text: str) -> None:
    print(f"[compute-share] {text}", file=sys.stderr, flush=True)


def _last_json(lines: list[str]) -> Result:
    for line in reversed(lines):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {"error": "no result line: " + " | ".join(lines[-3:])[-300:]}


class _Worker:
    """A worker process whose stdout lines are collected by a thread, so READY can be awaited with a timeout."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._ready: queue.Queue[bool] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())
            if line.strip() == "READY":
                self._ready.put(True)
        self._ready.put(False)

    def ready(self, timeout: float) -> bool:
        try:
            return self._ready.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return False

    def result(self, timeout: float) -> Result:
        try:
            self.process.wait(timeout=max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            self.kill()
            return {"error": f"still running after {timeout:.0f} s; killed"}
        self._reader.join(timeout=10)  # it ends at the end of the output, after the result line
        return _last_json(self.lines)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@dataclass
class Runner:
    python: str
    script: Path
    backend: str  # "torch" or "stand-in"
    shim: Path
    work: Path
    timing: Timing
    deadline: float  # host-monotonic time by which every process has ended

    def _fits(self, name: str, cost: float) -> bool:
        left = self.deadline - time.monotonic()
        if cost > left:
            _say(f"{name}: skipped, needs ~{cost:.0f} s and {left:.0f} s of the budget are left")
            return False
        return True

    def _timeout(self, cost: float) -> float:
        return min(2 * cost + 20, self.deadline - time.monotonic() + 10)

    def _start(self, name: str, limit: Limit, region: str, spec: dict[str, Any]) -> _Worker:
        env = limit.environment(os.environ, self.shim, self.work / f"{region}.region")
        spec = {"name": name, "backend": self.backend, "warmup_s": self.timing.warmup_s, **spec}
        return _Worker([self.python, str(self.script), "worker", json.dumps(spec)], env)

    def solo(self, case: Solo) -> Result:
        cost = case.cost(self.timing)
        if not self._fits(case.name, cost):
            return {"skipped": "time budget"}
        _say(f"== {case.name}: alone on the GPU, {case.limit}")
        t = self.timing
        worker = self._start(case.name, case.limit, case.name, {
            "role": "solo", "kinds": list(case.kinds), "seconds": t.solo_s, "decode_s": t.decode_s if case.decode
            else 0.0, "kernel_time": case.kernel_time, "launch": case.launch})
        return worker.result(self._timeout(cost))

    def group(self, group: Group) -> dict[str, Result]:
        cost = group.cost(self.timing)
        if not self._fits(group.name, cost):
            return {t.name: {"skipped": "time budget"} for t in group.tenants}
        _say(f"== {group.name}: " + ", ".join(f"{t.name} {t.limit} from {t.start_s:.1f} s" for t in group.tenants))
        go = self.work / f"{group.name}.go"
        workers = {t.name: self._start(f"{group.name}/{t.name}", t.limit, f"{group.name}-{t.name}", {
            "role": "tenant", "kind": group.kind, "go": str(go), "start_s": t.start_s, "end_s": group.end_s})
            for t in group.tenants}
        timeout = self._timeout(cost)
        begin = time.monotonic()
        if all(w.ready(timeout - (time.monotonic() - begin)) for w in workers.values()):
            staged = go.with_suffix(".tmp")
            staged.write_text(repr(time.monotonic() + 0.05))
            staged.replace(go)  # the tenants read a whole start time or none
        else:
            _say(f"{group.name}: not every tenant became ready; stopping the group")
            for w in workers.values():
                w.kill()
        results = {name: w.result(timeout - (time.monotonic() - begin)) for name, w in workers.items()}
        for result in results.values():
            if "error" not in result and "log" not in result:  # killed before it could say why
                result.clear()
                result["error"] = "stopped: another tenant of the group did not become ready"
        return results
