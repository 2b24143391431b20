"""The scorer contract: per-device scores 0..100 over all candidate devices at once.

A scorer sees one request part and the array of candidate device rows (every
device of the cluster that passed the filters) and returns one score per row.
Scorers that judge a *set* of devices (topology) also implement
``score_set``; the default set score is the mean of the device scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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
    # Cores the part takes on each candidate where a device's rule rounds them (partitions);
    # None when every candidate takes the part's own cores.
    cores: IntArray | None = None
    # Per-decision memo shared by the scorers (gathered columns, derived figures); read-only.
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def column(self, name: str) -> npt.NDArray[Any]:
        """``cluster.<name>[rows]``, gathered once per context (do not modify the result)."""
        key = "col:" + name
        value: npt.NDArray[Any] | None = self.cache.get(key)
        if value is None:
            value = self.cache[key] = getattr(self.cluster, name).take(self.rows)
        return value

    @property
    def share(self) -> FloatArray:
        """The fraction of each candidate device the part takes (the scarcer of memory and cores)."""
        value = self.cache.get("share")
        if value is None:
            mem = self.memory / np.maximum(self.column("mem_cap"), 1)
            value = self.cache["share"] = np.maximum(mem, self.granted_cores / 100.0)
        return value  # type: ignore[no-any-return]

    @property
    def granted_cores(self) -> IntArray | int:
        """Cores (percent) the part takes on each candidate: one number when it is the same everywhere."""
        return self.part.cores if self.cores is None else self.cores


@dataclass
class HostContext:
    """A request that needs host CPU and memory only, and the node rows that can hold it."""

    cluster: ClusterState
    request: ResourceRequest
    nodes: IntArray
    mix: WorkloadMix | None = None
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


class Scorer:
    """Base class; subclasses set ``name`` and implement ``score``."""

    name = "scorer"

    def score_host(self, ctx: HostContext) -> FloatArray | None:
        """Scores of the candidate nodes for a request without devices; None: this scorer has no view."""
        return None

    def observe(self, request: ResourceRequest) -> None:
        """Called once for every request ``Engine.observe`` is given: each request a scheduler decides,
        before it is placed (placing alone never calls it).

        Scorers that learn from the workload (the fragmentation scorer's mix) learn
        here, from what has been asked so far and nothing later.
        """
        return None

    def score(self, ctx: ScoreContext) -> FloatArray:
        raise NotImplementedError

    def constant(self, ctx: ScoreContext) -> float | None:
        """The score every candidate gets when it is the same for all of them (else None).

        Optional shortcut: the engine then skips ``score`` and adds one scalar instead of
        an array; it must equal what ``score`` would return for every candidate.
        """
        return None

    def score_set(self, ctx: ScoreContext, rows: Sequence[int], device_scores: FloatArray) -> float:
        return float(np.mean(device_scores)) if len(device_scores) else 0.0

