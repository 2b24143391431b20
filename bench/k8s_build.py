"""What the Kubernetes tests' Go programs cost to build: cold (empty Go build cache) and warm.

Builds etcd, kube-scheduler, kube-apiserver (tests/kubernetes/cluster/) and the kubelet driver
(tests/kubernetes/kubelet/) in that order, as tests/kubernetes/gobuild.py does (``go build -trimpath``),
first with a fresh ``GOCACHE`` (the module cache is kept: downloading is separate, ``go mod download`` of the
cluster module is about 500 MB), then again with that cache (what a later run that lost only the
binaries pays). Per program: wall seconds and CPU seconds (user + system, the compiler processes
included). CPU seconds / cores is the wall time a quiet machine would take; wall time here depends on
whatever else the machine runs.

    python bench/k8s_build.py      # about 12 CPU-minutes
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = [
    ("etcd", ROOT / "tests/kubernetes/cluster", "./etcd"),
    ("kube-scheduler", ROOT / "tests/kubernetes/cluster", "k8s.io/kubernetes/cmd/kube-scheduler"),
    ("kube-apiserver", ROOT / "tests/kubernetes/cluster", "k8s.io/kubernetes/cmd/kube-apiserver"),
    ("kubeletdriver", ROOT / "tests/kubernetes/kubelet", "./kubeletdriver"),
]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build_all(gocache: Path, out: Path) -> dict[str, dict[str, float]]:
    figures = {}
    env = {**os.environ, "GOCACHE": str(gocache)}
    for name, module, package in PROGRAMS:
        wall, cpu = time.perf_counter(), _cpu()
        subprocess.run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(out / name), package],
                       cwd=module, env=env, check=True, capture_output=True)
        figures[name] = {"wall_s": round(time.perf_counter() - wall, 1), "cpu_s": round(_cpu() - cpu, 1)}
        (out / name).unlink()
    return figures


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="k8s-build-") as tmp:
        gocache, out = Path(tmp) / "gocache", Path(tmp) / "bin"
        out.mkdir()
        cold = build_all(gocache, out)
        warm = build_all(gocache, out)
    total = {label: {k: round(sum(f[k] for f in figures.values()), 1) for k in ("wall_s", "cpu_s")}
             for label, figures in (("cold", cold), ("warm", warm))}
    go = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    print(json.dumps({"go": go, "cores": os.cpu_count(), "cold": cold, "warm": warm, "total": total,
                      "quiet_machine_cold_wall_s": round(total["cold"]["cpu_s"] / (os.cpu_count() or 1), 1)}))


if __name__ == "__main__":
    main()
