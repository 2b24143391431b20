"""Trait affinity: how well a device's hardware suits the task type.

* training: bf16/fp16 throughput (0.5), device memory (0.3), and for
  multi-device parts the interconnect bandwidth (0.2; else throughput again);
* inference: with a latency SLO, devices meeting it (see
  ``scheduling.latency``) score 50..100, the cheapest (``relative_cost``)
  highest; devices missing it score below 50 in proportion.  Without an SLO:
  memory bandwidth (0.6) and low contention (0.4);
* interactive: older cards (0.6) and a small share of the card (0.4);
* batch: cheap cards (0.5) and cards already in use (0.5): it fills what
  the other types leave.

Figures are scaled against the best candidate, so scores are relative to
what the cluster can offer for this request.
"""

from __future__ import annotations

import numpy as np

from hami_devices.models import PRECISIONS, TaskType
from hami_devices.scheduling.latency import estimate_latency_ms
from hami_devices.scheduling.scorers.base import FloatArray, ScoreContext, Scorer
from hami_devices.scheduling.scorers.fit import fullness_after

_P = {p: i for i, p in enumerate(PRECISIONS)}


def _ratio(values: FloatArray) -> FloatArray:
    top = float(values.max()) if values.size else 0.0
    if top <= 0:
        return np.ones(values.shape)
    return values / top


class TraitAffinityScorer(Scorer):
    name = "trait-affinity"

    def score(self, ctx: ScoreContext) -> FloatArray:
        kind = ctx.request.task_type
        if kind == TaskType.TRAINING:
            return self._training(ctx)
        if kind == TaskType.INFERENCE:
            return self._inference(ctx)
        if kind == TaskType.INTERACTIVE:
            return self._interactive(ctx)
        return self._batch(ctx)

    def _training(self, ctx: ScoreContext) -> FloatArray:
        c, rows = ctx.cluster, ctx.rows
        if ctx.part.precision is not None:
            flops = c.tflops[rows, _P[ctx.part.precision]]
        else:
            flops = np.maximum(c.tflops[rows, _P["bf16"]], c.tflops[rows, _P["fp16"]])
        compute = _ratio(flops)
        memory = _ratio(ctx.column("mem_total").astype(np.float64))
        link = _ratio(c.link_bw[rows]) if ctx.part.count > 1 else compute
        return 100.0 * (0.5 * compute + 0.3 * memory + 0.2 * link)

    def _inference(self, ctx: ScoreContext) -> FloatArray:
        slo = ctx.request.latency_slo_ms
        if slo is None:
            contention = 1.0 / (1.0 + ctx.column("sharers"))
            return 100.0 * (0.6 * _ratio(ctx.column("bandwidth")) + 0.4 * contention)
        latency = estimate_latency_ms(ctx.memory, ctx.column("bandwidth"), ctx.column("sharers"))
        meets = latency <= slo
        cost = ctx.column("cost")
        cheapest = float(cost[meets].min()) if meets.any() else 1.0
        with np.errstate(divide="ignore"):
            missing = 50.0 * np.clip(slo / latency, 0.0, 0.999)
        return np.where(meets, 50.0 + 50.0 * cheapest / cost, missing)

    def _interactive(self, ctx: ScoreContext) -> FloatArray:
        year = ctx.column("year").astype(np.float64)
        known = year > 0
        if known.any():
            newest, oldest = float(year[known].max()), float(year[known].min())
            span = max(newest - oldest, 1.0)
            age = np.where(known, (newest - year) / span, 0.5)
        else:
            age = np.full(year.shape, 0.5)
        small = 1.0 - np.clip(ctx.share, 0.0, 1.0)
        return 100.0 * (0.6 * age + 0.4 * small)

    def _batch(self, ctx: ScoreContext) -> FloatArray:
        cost = ctx.column("cost")
        cheap = float(cost.min()) / cost
        return 100.0 * (0.5 * cheap + 0.5 * fullness_after(ctx))
