"""The scorer contract: per-device scores 0..100 over all candidate devices at once.

A scorer sees one request part and the array of candidate device rows (every
device of the cluster that passed the filters) and returns one score per row.
Scorers that judge a *set* of devices (topology) also implement
``score_set``; the default set score is the mean of the device scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hami_devices.models import RequestPart, ResourceRequest
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.fgd import WorkloadMix

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass
class ScoreContext:
    cluster: ClusterState
    request: ResourceRequest
    part: RequestPart
    part_index: int
    rows: IntArray  # candidate device rows
    memory: IntArray  # MiB the part takes on each candidate
    mix: WorkloadMix | None = None

    @property
    def share(self) -> FloatArray:
        """The fraction of each candidate device the part takes (the scarcer of memory and cores)."""
        mem = self.memory / np.maximum(self.cluster.mem_capacity(self.rows), 1)
        return np.maximum(mem, self.part.cores / 100.0)


class Scorer:
    """Base class; subclasses set ``name`` and implement ``score``."""

    name = "scorer"

    def score(self, ctx: ScoreContext) -> FloatArray:
        raise NotImplementedError

    def score_set(self, ctx: ScoreContext, rows: Sequence[int], device_scores: FloatArray) -> float:
        return float(np.mean(device_scores)) if len(device_scores) else 0.0


def minmax(values: FloatArray, higher_is_better: bool = True) -> FloatArray:
    """Scale to 0..100 over the candidates; all-equal values score 100."""
    if values.size == 0:
        return values
    low, high = float(values.min()), float(values.max())
    if high - low < 1e-12:
        return np.full(values.shape, 100.0)
    scaled = (values - low) / (high - low)
    return 100.0 * (scaled if higher_is_better else 1.0 - scaled)
