"""Cut the openb sample the package ships from the full trace (run once; the output is committed).

    python scripts/openb_sample.py FULL_TRACE_DIR [--fraction 0.0625] [--out hami_devices/simulate/openb-sample]

Nodes: every kind of node (GPU model, GPU count, CPU, memory) keeps its share of the cluster, by
largest remainder, and every GPU model keeps at least one node (a ``gpu_spec`` naming it can still
be met); within a kind the nodes are taken evenly spaced through the file.  Tasks: each pod-list
variant keeps the tasks whose name hashes below the cluster's kept share of GPU capacity, so the
task list still asks for about as much as the smaller cluster holds, and a task name kept in one
variant is kept in every variant that has it.  Rows are copied byte for byte, with every column, so
the same loader reads the sample and the full trace.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
from collections import defaultdict
from pathlib import Path

NODES = "openb_node_list_gpu_node.csv"
OUT = Path(__file__).resolve().parent.parent / "hami_devices" / "simulate" / "openb-sample"


def _kind(row: dict[str, str]) -> tuple[str, str, str, str]:
    return row["model"], row["gpu"], row["cpu_milli"], row["memory_mib"]


def sample_nodes(lines: list[str], fraction: float) -> tuple[list[str], float]:
    """The kept node rows (header first) and the kept share of GPU capacity."""
    rows = list(csv.DictReader(io.StringIO("".join(lines))))
    kinds: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        kinds[_kind(row)].append(i)
    quota = {k: len(v) * fraction for k, v in kinds.items()}
    keep = {k: int(q) for k, q in quota.items()}
    target = round(len(rows) * fraction)
    for k in sorted(quota, key=lambda k: quota[k] - keep[k], reverse=True)[: max(0, target - sum(keep.values()))]:
        keep[k] += 1
    for model in {k[0] for k in kinds}:
        if not any(keep[k] for k in kinds if k[0] == model):
            keep[max((k for k in kinds if k[0] == model), key=lambda k: len(kinds[k]))] = 1
    chosen: list[int] = []
    for k, members in kinds.items():
        step = len(members) / keep[k] if keep[k] else 0
        chosen += [members[int(j * step + step / 2)] for j in range(keep[k])]
    chosen.sort()
    full = sum(int(r["gpu"]) for r in rows)
    kept = sum(int(rows[i]["gpu"]) for i in chosen)
    return [lines[0], *(lines[i + 1] for i in chosen)], kept / full


def _hash_share(name: str) -> float:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") / 2**64


def sample_pods(lines: list[str], share: float) -> list[str]:
    return [lines[0], *(line for line in lines[1:] if _hash_share(line.split(",", 1)[0]) < share)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="the full openb folder (openb_node_list_gpu_node.csv, ...)")
    parser.add_argument("--fraction", type=float, default=1 / 16, help="share of the nodes to keep")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    node_lines, share = sample_nodes((args.trace / NODES).read_text().splitlines(keepends=True), args.fraction)
    (args.out / NODES).write_text("".join(node_lines))
    print(f"{NODES}: {len(node_lines) - 1} nodes, {share:.4f} of the GPU capacity")
    for pods in sorted(args.trace.glob("openb_pod_list_*.csv")):
        kept = sample_pods(pods.read_text().splitlines(keepends=True), share)
        (args.out / pods.name).write_text("".join(kept))
        print(f"{pods.name}: {len(kept) - 1} tasks")


if __name__ == "__main__":
    main()
