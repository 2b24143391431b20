"""The openb sample shipped with the package, and finding a trace folder (the full trace or the sample).

``openb-sample/`` holds 77 of the 1,213 GPU nodes (every node kind in proportion, every GPU model) and,
for each of the nine pod-list variants, the tasks that ask for about as much as those nodes hold
(``scripts/openb_sample.py`` cut it; its README gives the terms, the citation and where to get the
full trace).  ``hami-devices simulate`` replays it when no trace is named; the benchmarks use it when
the full trace is not where they look.
"""

from __future__ import annotations

import sys
from pathlib import Path

SAMPLE_DIR = Path(__file__).resolve().parent / "openb-sample"
NODE_FILE = "openb_node_list_gpu_node.csv"
FULL_TRACE_URL = "https://github.com/alibaba/clusterdata/tree/master/cluster-trace-gpu-v2023"


def pod_file(folder: Path, variant: str = "default") -> Path:
    """``openb_pod_list_<variant>.csv`` in ``folder``."""
    return folder / f"openb_pod_list_{variant}.csv"


def has_trace(folder: Path) -> bool:
    return (folder / NODE_FILE).is_file()


def trace_folder(wanted: Path, *, quiet: bool = False) -> tuple[Path, bool]:
    """``wanted`` when it holds an openb trace, else the shipped sample (saying so on stderr).

    Returns the folder and whether it is the sample: figures from the sample are not comparable with
    the published full-trace figures.
    """
    if has_trace(wanted):
        return wanted, wanted.resolve() == SAMPLE_DIR
    if not quiet:
        print(
            f"note: no openb trace in {wanted}; using the shipped sample ({SAMPLE_DIR}: 77 of 1,213 nodes). "
            f"Its figures are not the published ones; get the full trace from {FULL_TRACE_URL} "
            "and pass --traces DIR.",
            file=sys.stderr,
        )
    return SAMPLE_DIR, True
