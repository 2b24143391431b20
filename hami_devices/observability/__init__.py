"""Observability: the Prometheus exporter, lifecycle events, and usage reports for chargeback.

- ``server.start(devices, ledger, listen=...)``: ``/metrics`` (``collector``), with one collector thread
  and timeout per vendor library, the limiter regions and the ledger (``snapshot``, ``timeouts``);
- ``observer.Observer``: process starts and exits, device health changes and usage samples, recorded
  once each in the ledger; ``record_process_exit`` and ``record_limiter_refusals`` for callers that
  know more than a poller can see;
- ``usage.usage_report``: share-weighted device-hours per queue, workload, owner or device;
- ``names``: every metric served and its DCGM / HAMi / Ascend / Cambricon equivalent;
- ``dashboard.json`` (Grafana) and ``prometheus-rules.yml`` (recording rules with the field's names).

The allocation events themselves (granted, refused, released, evicted) are written by
``hami_devices.allocation`` through the ledger (``hami_devices.ledger.lifecycle``).

Needs the ``observability`` extra (``prometheus_client``) for the exporter; events and usage
reports need nothing beyond the core.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def packaged(name: str) -> Path:
    """Path of a file shipped in this package (``dashboard.json``, ``prometheus-rules.yml``)."""
    return Path(str(resources.files(__package__).joinpath(name)))
