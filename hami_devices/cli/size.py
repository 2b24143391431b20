"""``hami-devices size``: the precision plan of an ONNX model and the memory to request for it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from hami_devices.cli.output import emit_json, print_table
from hami_devices.errors import InvalidRequest
from hami_devices.sizing.allowance import FRAMEWORKS
from hami_devices.sizing.report import DEFAULT_HEADROOM, SizingReport, size_model


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "size",
        help="plan a model's precision per operator and size its memory request",
        description="Reads an ONNX model at a batch size, plans which operators run in 16 bits on the device "
        "(operators the autocast lists keep in fp32 stay there), and prints the memory at that plan with its "
        "breakdown and the memory_mib to request. Needs the [precision] extra.",
    )
    parser.add_argument("model", metavar="MODEL.onnx")
    parser.add_argument("--batch", type=int, default=1, help="batch size (the first input dimension; default 1)")
    parser.add_argument("--task", choices=("inference", "training"), default="inference")
    parser.add_argument("--device-model", metavar="NAME", help="a traits catalog model (T4, A100-80GB, 910B3 ...)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), help="force the lowered operators' precision")
    parser.add_argument("--optimizer", choices=("adam", "sgd-momentum", "sgd"), default="adam", help="for training")
    parser.add_argument(
        "--headroom", type=float, default=DEFAULT_HEADROOM, help=f"fraction added (default {DEFAULT_HEADROOM})"
    )
    parser.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="the full shape of an input with symbolic dimensions besides the batch (repeatable)",
    )
    parser.add_argument("--framework", choices=FRAMEWORKS, default="pytorch",
                        help="the process's framework, for its workspace allowance (default: %(default)s)")
    parser.add_argument("--plan-out", metavar="FILE", help="also write the per-operator plan as JSON")
    parser.add_argument("--operators", action="store_true", help="with --json: list every operator")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of text")
    parser.set_defaults(func=run)


def _shapes(items: list[str]) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise InvalidRequest("--input-shape", f"{item!r} is not NAME=D0,D1,...") from None
    return shapes


def _print(report: SizingReport) -> None:
    data = report.to_dict()
    device = data["device_model"] or "any device with 16-bit matrix math"
    print(f"{data['model']}: batch {data['batch']}, {data['task']}, on {device}: plan {data['precision']}")
    rows = []
    for group, facts in data["groups"].items():
        precisions = ", ".join(f"{p} x{n}" for p, n in facts["precisions"].items())
        types = ", ".join(f"{t} x{n}" for t, n in sorted(facts["op_types"].items(), key=lambda kv: -kv[1]))
        rows.append([group, precisions, types])
    print_table(["group", "runs at", "operators"], rows)
    rows = [[k, f"{v:.1f}"] for k, v in data["breakdown_mib"].items() if v]
    rows.append(["total", f"{data['estimate_mib']:.1f}"])
    print_table(["memory", "MiB"], rows)
    speed = data["relative_speed"]
    print(
        f"fp32 plan: {data['fp32_estimate_mib']:.1f} MiB; this plan saves {data['saving_vs_fp32']:.0%}"
        + (f", expected speed x{speed:.2f} of fp32" if speed is not None else "")
    )
    print(f"weights-only estimate: {data['weights_only_mib']:.1f} MiB")
    allowance = data["allowance"]
    print(f"memory_mib: {data['memory_mib']} (estimate + {data['headroom']:.0%} headroom + "
          f"{allowance['workspace_mib']} MiB {allowance['framework']} workspaces: {allowance['workspace_source']})")
    context = allowance["context_mib"]
    print(f"runtime context per process: {'not known' if context is None else f'{context} MiB'}, outside "
          f"memory_mib: the scheduler books it beside the share ({allowance['context_source']})")


def run(args: argparse.Namespace) -> int:
    report = size_model(
        args.model,
        args.batch,
        args.task,
        device_model=args.device_model,
        precision=args.precision,
        optimizer=args.optimizer,
        headroom=args.headroom,
        input_shapes=_shapes(args.input_shape),
        framework=args.framework,
    )
    if args.plan_out:
        Path(args.plan_out).write_text(json.dumps(report.plan_document(), indent=1))
    if args.json:
        emit_json(report.to_dict(operators=args.operators))
    else:
        _print(report)
    return 0
