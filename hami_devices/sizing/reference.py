"""Model-referenced requests: a ``ModelReference`` resolved into MiB, and the plan a workload receives.

``resolve_memory`` is what ``RequestPart`` calls when a part names a model instead of a
memory figure: the request figure of the model's plan (a 16-bit plan unless the part
fixes ``precision``: every catalog device has fp16 or bf16 matrix math, and both store
two bytes, so the figure holds on any of them).  The engine then places the part like
any other, with its fit and task-type scorers.

Once granted, ``plan_environments`` writes, per (node, vendor) group of the allocation,
the plan on the granted device's own traits (bf16 or fp16, whichever it runs faster)
to a JSON file beside the limiter regions, and names it in ``HAMI_PRECISION_PLAN``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from hami_devices import limiter
from hami_devices.errors import InvalidRequest
from hami_devices.models import DeviceHandle, DeviceTraits, ModelReference, group_key
from hami_devices.sizing.report import size_model, traits_named

PLAN_VARIABLE = "HAMI_PRECISION_PLAN"


def resolve_memory(ref: ModelReference, precision: str | None = None) -> int:
    """The MiB to request for ``ref`` (see the module doc)."""
    if precision not in (None, "fp32", "bf16", "fp16"):
        raise InvalidRequest("precision", f"a model-sized part plans in fp32, bf16 or fp16, not {precision}")
    report = size_model(
        ref.path, ref.batch, ref.task, precision=precision, optimizer=ref.optimizer, headroom=ref.headroom
    )
    return report.memory_mib


def _device_traits(model: str) -> DeviceTraits | None:
    try:
        return traits_named(model)
    except InvalidRequest:
        return None


def plan_environments(handle: DeviceHandle, folder: Path | None = None) -> dict[str, dict[str, str]]:
    """``HAMI_PRECISION_PLAN`` per (node, vendor) group that holds a model-sized part (see the module doc).

    The files go to ``folder``, by default the limiter's region folder.
    """
    documents: dict[str, list[dict[str, object]]] = {}
    for index, part in enumerate(handle.request.parts):
        ref = part.model_ref
        if ref is None:
            continue
        for grant in (g for g in handle.grants if g.part == index):
            key = group_key(grant.node, grant.vendor)
            if any(d["part"] == index and d["device_model"] == grant.model for d in documents.get(key, [])):
                continue
            traits = _device_traits(grant.model)
            report = size_model(
                ref.path,
                ref.batch,
                ref.task,
                device_model=grant.model if traits is not None else None,
                precision=part.precision,
                optimizer=ref.optimizer,
                headroom=ref.headroom,
            )
            entry = {"part": index, "device_model": grant.model, **report.plan_document()}
            entry["memory_mib"] = report.memory_mib
            documents.setdefault(key, []).append(entry)
    environments: dict[str, dict[str, str]] = {}
    if documents and folder is None:
        folder = limiter.region_dir()
    for key, plans in documents.items():
        assert folder is not None
        path = folder / f"{handle.id}-{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}.plan.json"
        path.write_text(json.dumps({"allocation": handle.id, "plans": plans}, indent=1))
        environments[key] = {PLAN_VARIABLE: str(path)}
    return environments


def remove_plans(environments: Mapping[str, Mapping[str, str]]) -> None:
    for env in environments.values():
        if PLAN_VARIABLE in env:
            Path(env[PLAN_VARIABLE]).unlink(missing_ok=True)
