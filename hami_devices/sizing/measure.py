"""Peak memory of a model as onnxruntime's CPU allocator reports it: the check on the estimates.

The session runs the graph as given (no graph optimisations: no fusions or constant
folding that a GPU runtime in eager mode would not do either), allocates every tensor
from its arena as the graph runs (no static memory pattern: the way a caching
allocator behaves), and does not prepack weights (a CPU-only copy).  Its profiler
reports the arena's statistics after every operator; the peak bytes in use over the
run is the figure, to which are added the parameter bytes the profiler reports per
operator (onnxruntime reads initializers in place, outside the arena) and the inputs
fed (a GPU runtime holds them in device memory; here they stay the caller's).

The profiler's operator list also shows the casts onnxruntime inserts around
operators it has no kernel for at the fed precision (``fallback_casts``): a CPU build
runs most fp16 operators in fp32 that way, with fp32 copies a GPU would not make.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_devices.extras import require


@dataclass(frozen=True)
class Measured:
    peak: int  # weights + arena peak + feeds, bytes
    arena_peak: int
    arena_held: int
    weights: int
    feeds: int
    operators: int  # operator executions the profiler saw
    fallback_casts: int  # casts the runtime inserted around operators it lacks a kernel for


def measure_onnxruntime(model: Any, feeds: Mapping[str, Any], *, threads: int = 1) -> Measured:
    """Run ``model`` (an ``onnx.ModelProto`` or its bytes) once on ``feeds`` and read the arena's statistics."""
    ort = require("onnxruntime", "measuring a model's memory with onnxruntime")
    payload = model if isinstance(model, bytes) else model.SerializeToString()
    given_casts = 0 if isinstance(model, bytes) else sum(1 for n in model.graph.node if n.op_type == "Cast")
    with tempfile.TemporaryDirectory(prefix="hami-ort-") as scratch:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.enable_mem_pattern = False
        options.enable_mem_reuse = False
        options.enable_cpu_mem_arena = True
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.disable_prepacking", "1")
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(scratch) / "profile")
        options.log_severity_level = 3
        session = ort.InferenceSession(payload, options, providers=["CPUExecutionProvider"])
        session.run(None, dict(feeds))
        events = json.loads(Path(session.end_profiling()).read_text())
    nodes = [e["args"] for e in events if e.get("cat") == "Node" and "mem_in_use_peak" in e.get("args", {})]
    arena_peak = max((int(a["mem_in_use_peak"]) for a in nodes), default=0)
    arena_held = max((int(a["mem_arena_held"]) for a in nodes), default=0)
    weights = sum(int(a.get("parameter_size", 0)) for a in nodes)
    fed = sum(int(v.nbytes) for v in feeds.values())
    casts = sum(1 for a in nodes if a.get("op_name") == "Cast")
    return Measured(
        peak=weights + arena_peak + fed,
        arena_peak=arena_peak,
        arena_held=arena_held,
        weights=weights,
        feeds=fed,
        operators=len(nodes),
        fallback_casts=max(0, casts - given_casts),
    )
