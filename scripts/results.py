"""Results pages generated from the benches' JSON, never typed.

    python scripts/results.py run NAME [NAME ...]   # run benches, store bench/results/NAME.json
    python scripts/results.py render                 # write docs/results/*.md from bench/results/*.json
    python scripts/results.py check                  # exit 1 when docs/results/ is not what render writes

``run`` wraps a bench's one JSON object with how it was measured: the command, the commit (and whether
the work tree had changes), the machine and the load average before and after. ``render`` turns each
stored file into one page: that provenance, the bench's targets, then every figure of its output, each
printed from the JSON value (rounded to four significant digits), so no figure on a page is typed by hand.
Benches too expensive to rerun here (the full openb bound, defragmentation, the workflow engines, the GPU
runs) have no stored file: their pages do not exist and the guides link their commands instead.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STORED = REPO / "bench" / "results"
PAGES = REPO / "docs" / "results"


@dataclass(frozen=True)
class Bench:
    """One bench as the results pages run it: a title, the area it measures, and its arguments."""

    title: str
    area: str
    script: str
    args: tuple[str, ...] = ()

    def command(self) -> list[str]:
        return ["python", f"bench/{self.script}", *self.args]


BENCHES: dict[str, Bench] = {
    "allocate": Bench("Allocation latency", "what a scheduler waits for: place, refuse, hd.allocate", "allocate.py"),
    "engine_allocate": Bench(
        "engine.allocate on a SQLite ledger",
        "a scheduler's one engine deciding and committing at 1,000 nodes x 8 devices, beside hd.allocate and a "
        "commit that lists every allocation id",
        "engine_allocate.py",
    ),
    "scoring": Bench(
        "Scoring speed",
        "one placement decision per policy and fill level, and how it grows with the cluster",
        "scoring.py",
        ("--nodes", "500", "--policy", "fragmentation-aware", "--policy", "binpack", "--levels", "30,60",
         "--decisions", "200", "--no-openb", "--scaling", "100,500"),
    ),
    "placement": Bench(
        "Placement on openb",
        "unallocated GPU % on the openb traces against the published FGD and BestFit figures",
        "placement.py",
        ("--run", "fragmentation-aware:online", "--seeds", "42", "--jobs", "1"),
    ),
    "queues": Bench(
        "Queues",
        "static partitioning, a plain FIFO and the admission loop on the openb trace",
        "queues.py",
        ("--scale", "0.1", "--hours", "6"),
    ),
    "exporter": Bench("Exporter", "scrape latency and CPU with 64 devices and 640 allocations", "exporter.py"),
    "ledger": Bench(
        "Ledger commits", "commit latency with 1, 2, 4 and 8 writer processes (SQLite)", "ledger.py",
        ("--backends", "sqlite", "--commits", "150"),
    ),
    "limiter": Bench("Limiter", "shim overheads, over-limit bytes, reclaim, compute-limit error", "limiter.py",
                     ("--quick",)),
    "compute_share": Bench("Compute shares", "compute shares on the calibrated fake driver", "compute_share.py",
                           ("--quick",)),
    "precision": Bench("Sizing", "memory estimated from the model graph against onnxruntime's peak", "precision.py",
                       ("--quick",)),
}


# --- run -------------------------------------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def _machine() -> dict[str, Any]:
    model = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu": model, "cpus": os.cpu_count(), "system": platform.system(), "arch": platform.machine(),
            "python": platform.python_version()}


def _last_json_object(stdout: str) -> dict[str, Any]:
    """The last JSON object a bench printed, on one line or pretty-printed over many."""
    lines = stdout.strip().splitlines()
    for start in range(len(lines) - 1, -1, -1):
        if lines[start].startswith("{"):
            try:
                parsed = json.loads("\n".join(lines[start:]))
            except json.JSONDecodeError:
                continue
            if isinstance(parsed, dict):
                return parsed
    raise ValueError("the bench printed no JSON object")


def _beside_the_repository(value: Any) -> Any:
    """Paths beside the repository (the shared data folder) stored relative to it, as the benches' defaults name
    them, so that the pages render the same from any checkout."""
    if isinstance(value, dict):
        return {key: _beside_the_repository(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_beside_the_repository(item) for item in value]
    if isinstance(value, str) and value.startswith(str(REPO.parent) + os.sep):
        return os.path.relpath(value, REPO)
    return value


def run(name: str) -> Path:
    """Run one bench from the repository root and store its output with how it was measured."""
    bench = BENCHES[name]
    command = bench.command()
    before = [round(x, 2) for x in os.getloadavg()]
    started = time.time()
    done = subprocess.run([sys.executable, *command[1:]], cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.time() - started
    try:
        output = _last_json_object(done.stdout)  # some benches exit non-zero when a target is not met
    except ValueError as error:
        failed = f"{' '.join(command)} exited {done.returncode} without JSON"
        raise SystemExit(f"{failed}:\n{done.stderr[-3000:]}") from error
    record = {
        "bench": name,
        "command": " ".join(command),
        "commit": _git("rev-parse", "HEAD"),
        "work_tree_changed": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.datetime.fromtimestamp(started, datetime.UTC).strftime("%Y-%m-%dT%H:%MZ"),
        "machine": _machine(),
        "load_average_before": before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(wall, 1),
        "exit_status": done.returncode,
        "output": _beside_the_repository(output),
    }
    STORED.mkdir(parents=True, exist_ok=True)
    path = STORED / f"{name}.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


# --- render ----------------------------------------------------------------------------------------------------


def figure(value: Any) -> str:
    """One JSON value as a page prints it: integers whole, floats to four significant digits, fixed point."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == 0:
            return "0"
        decimals = max(0, 3 - math.floor(math.log10(abs(value))))
        return f"{value:.{decimals}f}"
    if value is None:
        return "n/a"
    if isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
        return ", ".join(figure(v) for v in value)
    return str(value)


def _leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _leaves(value[key], f"{path}.{key}" if path else str(key))]
    if isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, value)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _target_rows(name: str, target: Any) -> list[tuple[str, Any, Any, Any]]:
    """(name, value, bound, met) rows of one target: ``{value, bound, met}``, a bare bound, or a group of them."""
    if isinstance(target, dict) and not {"value", "bound", "met"} & target.keys():
        return [row for key in sorted(target) for row in _target_rows(f"{name}.{key}", target[key])]
    if isinstance(target, dict):
        return [(name, target.get("value"), target.get("bound"), target.get("met"))]
    if isinstance(target, bool):
        return [(name, None, None, target)]
    return [(name, None, target, None)]  # a bench that states only its bounds


def _all_target_rows(output: dict[str, Any]) -> list[tuple[str, Any, Any, Any]]:
    targets = output.get("targets")
    if not isinstance(targets, dict):
        return []
    return [row for name in sorted(targets) for row in _target_rows(name, targets[name])]


def _targets(output: dict[str, Any]) -> list[str]:
    rows = _all_target_rows(output)
    if not rows:
        return ["This bench sets no targets."]
    lines = ["| Target | Value | Bound | Met |", "|---|---|---|---|"]
    for name, value, bound, met in rows:
        cells = ["" if v is None else _cell(figure(v)) for v in (value, bound, met)]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return lines


def page(record: dict[str, Any]) -> str:
    """The results page of one stored run."""
    bench = BENCHES.get(record["bench"])
    title = bench.title if bench else record["bench"]
    area = bench.area if bench else ""
    machine = record["machine"]
    output = record["output"]
    changed = " (with uncommitted changes)" if record["work_tree_changed"] else ""
    lines = [
        f"# {title}",
        "",
        "<!-- generated by scripts/results.py from bench/results/"
        f"{record['bench']}.json: edit the bench or rerun it, not this page -->",
        "",
        f"{area[:1].upper()}{area[1:]}." if area else "",
        "",
        "| How it was measured | |",
        "|---|---|",
        f"| Command | `{record['command']}` |",
        f"| Commit | `{record['commit']}`{changed} |",
        f"| Date | {record['date']} |",
        f"| Machine | {_cell(str(machine['cpu']))}, {figure(machine['cpus'])} CPUs, {machine['system']} "
        f"{machine['arch']}, Python {machine['python']} |",
        f"| Load average before | {figure(record['load_average_before'])} |",
        f"| Load average after | {figure(record['load_average_after'])} |",
        f"| Wall time, seconds | {figure(record['wall_s'])} |",
        "",
        "## Targets",
        "",
        *_targets(output),
        "",
        "## Every figure of the run",
        "",
        "| Key | Value |",
        "|---|---|",
    ]
    figures = [(key, value) for key, value in _leaves(output) if not key.startswith("targets")]
    lines += [f"| `{key}` | {_cell(figure(value))} |" for key, value in figures]
    return "\n".join(lines) + "\n"


def index(records: list[dict[str, Any]]) -> str:
    """The results overview: one row per stored run, with how many of its targets it met."""
    lines = [
        "# Results",
        "",
        "<!-- generated by scripts/results.py: edit the bench or rerun it, not this page -->",
        "",
        "Every page here is written by `python scripts/results.py render` from the JSON a bench printed, stored "
        "in `bench/results/` with the command, the commit, the machine and the load average of the run. "
        "Rerun one with `python scripts/results.py run NAME`, then render. Figures vary with the machine "
        "and its load: read them with the load average beside them.",
        "",
        "| Area | Targets met | Load average | Date |",
        "|---|---|---|---|",
    ]
    for record in records:
        bench = BENCHES.get(record["bench"])
        title = bench.title if bench else record["bench"]
        rows = _all_target_rows(record["output"])
        flags = [met for _, _, _, met in rows if isinstance(met, bool)]
        met = "none set" if not rows else "bounds only" if not flags else (
            f"{figure(sum(flags))} of {figure(len(flags))}")
        lines.append(
            f"| [{title}]({record['bench']}.md) | {met} | {figure(record['load_average_before'])} | {record['date']} |"
        )
    lines += [
        "",
        "Not rerun here, so not on these pages (each is one command; its figures belong to the run that made them):",
        "",
        "- the offline bound and packing on every openb trace: `python bench/bound.py` (the `[solver]` extra; "
        "minutes per trace);",
        "- defragmentation with departures: `nice python bench/defrag.py --jobs 1`;",
        "- the Airflow and Spark engines with and without shares: `python bench/workflows.py`;",
        "- the PostgreSQL ledger: `python bench/ledger_postgresql.py`, and `bench/ledger.py` with its default "
        "backends;",
        "- the limiter and compute shares on a real GPU: `scripts/cuda-limiter-check.sh` and "
        "`scripts/compute_share_check.py` (see [Compute shares](../compute-shares.md)).",
    ]
    return "\n".join(lines) + "\n"


def records() -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(STORED.glob("*.json"))]


def rendered() -> dict[str, str]:
    """Every results page, by file name, as render writes it."""
    stored = records()
    pages = {f"{record['bench']}.md": page(record) for record in stored}
    pages["index.md"] = index(stored)
    return pages


def render(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.md"):
        stale.unlink()
    for name, text in rendered().items():
        (folder / name).write_text(text)


def check(folder: Path) -> list[str]:
    """The pages that differ from what render writes (missing, changed or left over)."""
    expected = rendered()
    present = {path.name: path.read_text() for path in folder.glob("*.md")} if folder.exists() else {}
    return sorted(name for name in expected.keys() | present.keys() if expected.get(name) != present.get(name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    run_verb = verbs.add_parser("run", help="run benches and store their JSON")
    run_verb.add_argument("names", nargs="+", choices=sorted(BENCHES))
    for verb in ("render", "check"):
        verbs.add_parser(verb).add_argument("--out", type=Path, default=PAGES)
    args = parser.parse_args(argv)
    if args.verb == "run":
        for name in args.names:
            print(run(name))
        return 0
    if args.verb == "render":
        render(args.out)
        return 0
    stale = check(args.out)
    if stale:
        print("out of date (python scripts/results.py render):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
