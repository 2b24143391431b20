"""``hami-devices exporter``: serve Prometheus metrics that tie every device to its workloads."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from hami_devices.cli.common import add_source, found_from, ledger_from, report_missing
from hami_devices.errors import InvalidRequest
from hami_devices.extras import require


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "exporter",
        help="serve /metrics for Prometheus (devices, allocations and their workloads, lifecycle counters)",
        description="Serves /metrics and, every --observe-interval, records workload process starts and exits, "
        "device health changes and usage samples in the ledger (for `events` and `usage`). "
        "Needs the observability extra: pip install 'hami-devices[observability]'.",
    )
    add_source(parser, ledger=True)
    parser.add_argument("--listen", default="127.0.0.1:9400", metavar="HOST:PORT", help="default: %(default)s")
    parser.add_argument(
        "--timeout", type=float, default=5.0, metavar="S",
        help="per-collector deadline within one collection (each vendor library, the limiter, the ledger)",
    )
    parser.add_argument(
        "--observe-interval", type=float, default=15.0, metavar="S",
        help="seconds between observation passes; 0 turns observation off (default: %(default)s)",
    )
    parser.add_argument(
        "--refresh-interval", type=float, default=5.0, metavar="S",
        help="read the libraries, regions and ledger in the background this often and serve the last reading, "
        "at most S plus --timeout seconds old (hami_exporter_snapshot_timestamp_seconds says when it was "
        "taken); 0 reads them on every scrape (default: %(default)s)",
    )
    parser.add_argument("--once", action="store_true", help="observe once, print one scrape to stdout, and exit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.refresh_interval < 0:
        raise InvalidRequest("--refresh-interval", "must be 0 (read on every scrape) or a positive number of seconds")
    require("prometheus_client", "hami-devices exporter")
    from hami_devices.observability import server
    from hami_devices.observability.observer import Observer

    ledger = ledger_from(args)
    found = found_from(args, ledger)
    devices = found.devices
    report_missing(found)  # said at start; served as hami_exporter_collector_up 0 with its error for as long
    if args.once:
        exporter = server.start(devices, ledger, listen=None, timeout_s=args.timeout, observe_interval_s=0,
                                missing=found.missing)
        try:
            Observer(ledger).observe(exporter.sampler.snapshot())
            sys.stdout.write(exporter.scrape().decode())
        finally:
            exporter.stop()
            ledger.close()
        return 0
    exporter = server.start(
        devices, ledger, listen=args.listen, timeout_s=args.timeout, observe_interval_s=args.observe_interval,
        refresh_interval_s=args.refresh_interval, missing=found.missing,
    )
    host, _ = server.parse_listen(args.listen)
    print(f"serving http://{host}:{exporter.port}/metrics ({len(devices)} devices)", file=sys.stderr, flush=True)

    def _stop(signum: int, frame: object) -> None:
        exporter.request_stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    exporter.wait()
    exporter.stop()
    ledger.close()
    return 0
