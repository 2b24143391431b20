"""Memory estimates from the model graph against onnxruntime's measured peak, on the test corpus.

Builds the corpus of tests/sizing/corpus.py (nine families, random weights, three
batch sizes each) and, for every model and batch, runs each plan the CPU runtime can
execute (fp32, and the fp16 plan as a mixed model) once in onnxruntime, reading the
arena's peak from its profiler (hami_devices.sizing.measure).  Prints one JSON object:

  models, cases              corpus size
  median_abs_error,          |estimate - measured| / measured over the natively executed
  max_abs_error              cases (fp32: onnxruntime's CPU build has no fp16 kernels for most operators)
  weights_only               the same errors for the Accelerate-style weights-only estimate
  fp16_on_cpu                the fp16 plans as onnxruntime's CPU build runs them: errors, and the casts
                             it inserts around operators it lacks an fp16 kernel for (the fp32 copies
                             these make are where the error comes from)
  savings                    per model, memory the device plan saves against fp32 (estimate, at the
                             middle batch), and whether any fp32-listed operator was lowered
  worst                      the cases with the largest error, with estimated and measured MiB

Run: .venv/bin/python bench/precision.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hami_devices.sizing.graph import read_onnx  # noqa: E402
from hami_devices.sizing.measure import measure_onnxruntime  # noqa: E402
from hami_devices.sizing.memory import MIB, estimate, weights_only  # noqa: E402
from hami_devices.sizing.mixed import mixed_model  # noqa: E402
from hami_devices.sizing.plan import plan_graph  # noqa: E402
from tests.sizing.corpus import CORPUS, feeds  # noqa: E402


def _stats(errors: list[float]) -> dict[str, float]:
    return {"median_abs_error": round(statistics.median(errors), 4), "max_abs_error": round(max(errors), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the two smaller batches only")
    args = parser.parse_args()
    native: list[float] = []
    baseline: list[float] = []
    half: list[float] = []
    cases: list[dict[str, Any]] = []
    savings: dict[str, Any] = {}
    for entry in CORPUS:
        model = entry.build()
        batches = entry.batches[:2] if args.quick else entry.batches
        for batch in batches:
            graph = read_onnx(model, batch)
            for low in ("fp32", "fp16"):
                plan = plan_graph(graph, low)
                measured = measure_onnxruntime(mixed_model(plan, model), feeds(model, batch))
                estimated = estimate(plan).total
                error = abs(estimated - measured.peak) / measured.peak
                case = {
                    "model": entry.family, "batch": batch, "precision": low, "error": round(error, 4),
                    "estimate_mib": round(estimated / MIB, 2), "measured_mib": round(measured.peak / MIB, 2),
                    "runtime_casts": measured.fallback_casts,
                }  # fmt: skip
                cases.append(case)
                if low == "fp32":
                    native.append(error)
                    baseline.append(abs(weights_only(plan) - measured.peak) / measured.peak)
                else:
                    half.append(error)
        graph = read_onnx(model, entry.batches[1])
        full, mixed = plan_graph(graph, "fp32"), plan_graph(graph, "fp16")
        savings[entry.family] = {
            "kind": entry.kind,
            "batch": entry.batches[1],
            "saving": round(1 - estimate(mixed).total / estimate(full).total, 4),
            "fp32_ops_lowered": len(mixed.lowered_fp32_ops),
        }
    fp16_cases = [c for c in cases if c["precision"] == "fp16"]
    result = {
        "models": len(CORPUS),
        "cases": len(native),
        **_stats(native),
        "weights_only": _stats(baseline),
        "fp16_on_cpu": {
            **_stats(half),
            "cases": len(half),
            "runtime_casts_per_model": {c["model"]: c["runtime_casts"] for c in fp16_cases},
        },
        "savings": savings,
        "cnn_transformer_min_saving": min(
            s["saving"] for s in savings.values() if s["kind"] in ("cnn", "transformer")
        ),
        "worst": sorted((c for c in cases if c["precision"] == "fp32"), key=lambda c: -c["error"])[:5],
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
