"""The Prometheus text format (0.0.4) of a snapshot's series, with each label string rendered once.

At 640 allocations a scrape holds ~5,000 series of 13 labels; ``prometheus_client``
escapes and validates every label of every sample on every scrape (~130 ms on
this machine, measured by bench/exporter.py).  A series' labels are fixed for its
life (an allocation's identity and grant never change), so, as kube-state-metrics
does, their rendered ``{...}`` string is kept between scrapes and only the value
is formatted each time.  Values use ``prometheus_client``'s own float formatting,
and a test parses this output and ``prometheus_client``'s for the same snapshot
and requires the same samples.  Labels with an empty value are left out: in
Prometheus an empty label is no label.
"""

from __future__ import annotations

import threading

from prometheus_client.utils import floatToGoString

from hami_devices.observability.names import MetricName
from hami_devices.observability.series import Labels, Rows, series
from hami_devices.observability.snapshot import Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _format(value: float) -> str:
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


def _escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def label_string(names: tuple[str, ...], values: Labels) -> str:
    pairs = [f'{n}="{_escape_value(v)}"' for n, v in zip(names, values, strict=True) if v != ""]
    return "{" + ",".join(pairs) + "}" if pairs else ""


class TextRenderer:
    """Renders snapshots; keeps the label strings of the series seen in the last scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (metric, labels) -> (value, line): most values (limits, totals, info) do not change between scrapes
        self._lines: dict[tuple[str, Labels], tuple[float, str]] = {}
        self._rows: Rows = {}
        self._headers: dict[str, str] = {}
        # metric -> (samples, rendered block): limits, totals and info series rarely change between scrapes
        self._blocks: dict[str, tuple[list[tuple[Labels, float]], str]] = {}

    def _header(self, metric: MetricName) -> str:
        header = self._headers.get(metric.name)
        if header is None:
            kind = "gauge" if metric.kind == "info" else metric.kind
            header = f"# HELP {metric.name} {_escape_help(metric.help)}\n# TYPE {metric.name} {kind}\n"
            self._headers[metric.name] = header
        return header

    def render(self, snapshot: Snapshot) -> bytes:
        with self._lock:
            kept: Rows = {}
            rows = series(snapshot, self._rows, kept)
            self._rows = kept
            previous, current = self._lines, {}
            blocks: dict[str, tuple[list[tuple[Labels, float]], str]] = {}
            parts: list[str] = []
            for metric, samples in rows.items():
                name = metric.name
                block = self._blocks.get(name)
                if block is not None and block[0] == samples:
                    text = block[1]  # the whole family is as it was: no line to look at
                    for labels, _value in samples:
                        current[(name, labels)] = previous[(name, labels)]
                else:
                    lines = [self._header(metric)]
                    for labels, value in samples:
                        key = (name, labels)
                        cached = previous.get(key)
                        if cached is None:
                            line = name + label_string(metric.labels, labels) + " " + _format(value) + "\n"
                        elif cached[0] != value:
                            line = cached[1][: cached[1].rindex(" ") + 1] + _format(value) + "\n"
                        else:
                            line = cached[1]
                        current[key] = (value, line)
                        lines.append(line)
                    text = "".join(lines)
                blocks[name] = (samples, text)
                parts.append(text)
            self._lines = current  # series gone since the last scrape are forgotten
            self._blocks = blocks
        return "".join(parts).encode()
