"""Loading the Alibaba openb trace CSVs into arrays.

Node files have ``sn,cpu_milli,memory_mib,gpu,model``; pod files have
``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`` (the multigpu
variants stop after ``gpu_milli``).  See ``openb-sample/README.md`` for the columns and the terms.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hami_devices.errors import InvalidRequest

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TraceNodes:
    """The cluster: one row per node; ``model_idx`` indexes ``models`` (-1: no GPU)."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    gpus: IntArray
    model_idx: IntArray
    models: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_capacity_milli(self) -> int:
        return int(self.gpus.sum()) * 1000


@dataclass(frozen=True)
class TracePods:
    """The task list: ``gpu_milli`` is per device; ``spec`` is the accepted models (None: any).

    ``creation``/``deletion`` (seconds of trace time) and ``qos`` are None where the file
    has no such columns (the multigpu variants).
    """

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    spec: tuple[frozenset[str] | None, ...]
    creation: IntArray | None = None
    deletion: IntArray | None = None
    qos: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_request_milli(self) -> IntArray:
        return self.num_gpu * self.gpu_milli


def _int(row: dict[str, str], key: str, path: Path, line: int) -> int:
    raw = (row.get(key) or "").strip()
    try:
        return int(float(raw)) if raw else 0
    except ValueError:
        raise InvalidRequest(key, f"line {line}: not a number: {raw!r}", source=str(path)) from None


def _rows(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise InvalidRequest(missing[0], "missing column", source=str(path))
        return list(reader)


def load_nodes(path: str | Path) -> TraceNodes:
    path = Path(path)
    rows = _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    models = tuple(sorted({r["model"].strip() for r in rows if r["model"].strip()}))
    index = {m: i for i, m in enumerate(models)}
    return TraceNodes(
        names=tuple(r["sn"] for r in rows),
        cpu_milli=np.array([_int(r, "cpu_milli", path, i + 2) for i, r in enumerate(rows)], dtype=np.int64),
        memory_mib=np.array([_int(r, "memory_mib", path, i + 2) for i, r in enumerate(rows)], dtype=np.int64),
        gpus=np.array([_int(r, "gpu", path, i + 2) for i, r in enumerate(rows)], dtype=np.int64),
        model_idx=np.array([index.get(r["model"].strip(), -1) for r in rows], dtype=np.int64),
        models=models,
    )


def load_pods(path: str | Path) -> TracePods:
    path = Path(path)
    rows = _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    num = np.array([_int(r, "num_gpu", path, i + 2) for i, r in enumerate(rows)], dtype=np.int64)
    milli = np.array([_int(r, "gpu_milli", path, i + 2) for i, r in enumerate(rows)], dtype=np.int64)
    # A task without GPUs asks for no share, whatever the column says.
    milli = np.where(num > 0, milli, 0)
    if (milli > 1000).any() or (milli < 0).any():
        line = int(np.flatnonzero((milli > 1000) | (milli < 0))[0]) + 2
        raise InvalidRequest("gpu_milli", f"line {line}: must be 0..1000", source=str(path))
    spec: list[frozenset[str] | None] = []
    for r in rows:
        raw = (r.get("gpu_spec") or "").strip()
        spec.append(frozenset(s for s in raw.split("|") if s) if raw else None)
    timed = bool(rows) and "creation_time" in rows[0] and "deletion_time" in rows[0]
    times: dict[str, IntArray | None] = {"creation": None, "deletion": None}
    if timed:
        for key in times:
            times[key] = np.array([_int(r, f"{key}_time", path, i + 2) for i, r in enumerate(rows)], dtype=np.int64)
    return TracePods(
        names=tuple(r["name"] for r in rows),
        cpu_milli=np.array([_int(r, "cpu_milli", path, i + 2) for i, r in enumerate(rows)], dtype=np.int64),
        memory_mib=np.array([_int(r, "memory_mib", path, i + 2) for i, r in enumerate(rows)], dtype=np.int64),
        num_gpu=num,
        gpu_milli=milli,
        spec=tuple(spec),
        creation=times["creation"],
        deletion=times["deletion"],
        qos=tuple((r.get("qos") or "").strip() for r in rows) if rows and "qos" in rows[0] else None,
    )
