"""A ``prometheus_client`` collector, to put hami-devices' series in an application's own registry.

An embedding scheduler that already serves ``prometheus_client`` metrics
registers ``HamiCollector(Sampler(devices, ledger))``; each ``collect()`` takes a
fresh snapshot (shared with a concurrent observer pass, see ``Sampler``).  The
standalone exporter serves the same series through ``exposition`` (faster at
hundreds of allocations); a test holds the two outputs identical.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami_devices.observability.series import series
from hami_devices.observability.snapshot import Sampler, Snapshot


def families(snapshot: Snapshot) -> list[Metric]:
    """The metric families of one snapshot."""
    out: list[Metric] = []
    for metric, rows in series(snapshot).items():
        family: Metric
        if metric.kind == "counter":
            family = CounterMetricFamily(metric.name, metric.help, labels=list(metric.labels))
        else:
            family = GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels))
        for labels, value in rows:
            family.add_metric(list(labels), value)
        out.append(family)
    return out


class HamiCollector(Collector):
    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def describe(self) -> list[Metric]:
        return []  # no collection at registration time: the first scrape is the first read of the hardware

    def collect(self) -> Iterator[Metric]:
        yield from families(self.sampler.snapshot())
