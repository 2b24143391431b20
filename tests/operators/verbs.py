"""Run several ``hami-devices`` commands in one process (pynvml keeps one library per process, so one
environment per process), and print each one's exit status, stdout and stderr as JSON.

Usage: ``python tests/operators/verbs.py '[["monitor", "--json"], ["allocate", ...]]'``."""

from __future__ import annotations

import contextlib
import io
import json
import sys

from hami_devices.cli.main import main


def run(commands: list[list[str]]) -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    for argv in commands:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        results.append({"rc": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
    return results


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
